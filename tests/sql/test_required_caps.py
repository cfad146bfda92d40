"""The capability a script needs is decided once, in cryo._required_caps, and a submit
given none (the server's, a child's, a trigger's, submit_run's) uses it."""

from __future__ import annotations

import psycopg
import pytest


@pytest.mark.parametrize(("filename", "interpreter", "caps"), [
    ("deploy.sh", None, ["shell"]),
    ("deploy.bash", "", ["shell"]),
    ("Makefile", None, ["shell"]),
    ("dir.d/run", None, ["shell"]),
    ("job.py", None, ["polyglot"]),
    ("job.py", "bash", ["shell"]),
    ("job.py", "/usr/bin/zsh -e", ["shell"]),
    ("run.sh", "python3 -u", ["polyglot"]),
    ("run", "/opt/node/bin/node", ["polyglot"]),
])
def test_the_rule(db: psycopg.Connection, filename: str, interpreter: str | None,
                  caps: list[str]) -> None:
    assert db.execute("SELECT cryo._required_caps(%s, %s)",
                      (filename, interpreter)).fetchone()[0] == caps


def test_a_submit_without_caps_uses_the_rule(db: psycopg.Connection) -> None:
    ids = [db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', %s, %s, "
                      "'\\x00', p_required_caps => NULL)", (f, i)).fetchone()[0]
           for f, i in (("a.py", None), ("a.py", "sh"))]
    got = db.execute("SELECT required_caps FROM cryo.queue WHERE run_id = ANY (%s) "
                     "ORDER BY array_position(%s, run_id)", (ids, ids)).fetchall()
    assert got == [(["polyglot"],), (["shell"],)]
