"""A run id is read one way: cryopg/run_ids.py and its SQL twin cryo._run_in_project
agree, on ids the engine makes and on ones it never would."""

from __future__ import annotations

import psycopg
import pytest

from cryopg.run_ids import in_project, run_tenant
from tests.sql.conftest import submit

CASES = ["dev:default:run-0", "dev:other:run-1", "else:default:run-2", "dev:default:key:x",
         "dev:default", "dev:default:run-a:b", "", "dev:de_ault:run-3"]


@pytest.mark.parametrize("run_id", CASES)
def test_python_and_sql_read_a_run_id_alike(db: psycopg.Connection, run_id: str) -> None:
    assert db.execute("SELECT cryo._run_in_project(%s, 'dev', 'default')",
                      (run_id,)).fetchone()[0] == in_project(run_id, "dev", "default")


def test_an_engine_made_id_names_its_tenant(db: psycopg.Connection) -> None:
    run_id = submit(db)
    assert run_tenant(run_id) == ("dev", "default")
    assert db.execute("SELECT cryo._run_org(%s), cryo._run_project(%s)",
                      (run_id, run_id)).fetchone() == ("dev", "default")
