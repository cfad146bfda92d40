"""sql/schema.sql is the migrated schema: a schema change shows up in review."""

from __future__ import annotations

from cryopg.paths import SQL_DIR
from cryopg.schema_dump import dump_schema


def test_committed_schema_dump_matches_a_fresh_migrate(dsn: str) -> None:
    committed = (SQL_DIR / "schema.sql").read_text()
    assert dump_schema(dsn) == committed, (
        "sql/schema.sql is stale: run scripts/dump-schema and commit the result")
