"""SQL (cryo.eval_expression) gives each compiled expression of tests/expr_vectors.json
the value the vector names."""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb

from cryopg.graphs.expr import parse, parse_template
from tests.expr_vectors import load


def test_sql_evaluates_the_vectors(db: psycopg.Connection) -> None:
    ids, vectors = load()
    wrong = []
    for v in vectors:
        if v.error is not None:
            continue
        compiled = (parse if v.kind == "expr" else parse_template)(v.text, ids)
        got = db.execute("SELECT cryo.eval_expression(%s, %s)",
                         (Jsonb(compiled), Jsonb(v.scope))).fetchone()[0]
        if got != v.value or type(got) is not type(v.value):
            wrong.append(f"{v.label}: wanted {v.value!r}, got {got!r}")
    assert wrong == []
