"""The compiler (cryopg/graphs/expr.py) and the editor's checker (expr.js, run by node)
accept every expression of tests/expr_vectors.json that has a value and refuse every one
that has an error, with that reason. SQL's values: tests/sql/test_expr_vectors.py."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from cryopg.graphs.expr import ExprError, parse, parse_template
from cryopg.paths import REPO_ROOT
from tests.expr_vectors import load

IDS, VECTORS = load()
EXPR_JS = REPO_ROOT / "cryopg" / "ui" / "static" / "editor" / "expr.js"


def test_the_compiler_agrees_with_the_vectors() -> None:
    wrong = []
    for v in VECTORS:
        try:
            (parse if v.kind == "expr" else parse_template)(v.text, IDS)
            got = None
        except ExprError as exc:
            got = str(exc)
        if (v.error is None) != (got is None) or (v.error and v.error not in (got or "")):
            wrong.append(f"{v.label}: wanted {v.error or 'a value'}, got {got or 'a value'}")
    assert wrong == []


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_editor_agrees_with_the_vectors() -> None:
    program = (
        f"import {{ checkExpr, checkTemplate }} from {json.dumps(EXPR_JS.as_uri())};\n"
        "let s = ''; process.stdin.on('data', (d) => { s += d; });\n"
        "process.stdin.on('end', () => {\n"
        "  const [ids, vs] = JSON.parse(s); const set = new Set(ids);\n"
        "  process.stdout.write(JSON.stringify(vs.map(([k, t]) =>\n"
        "    (k === 'expr' ? checkExpr : checkTemplate)(t, set)))); });\n")
    sent = json.dumps([sorted(IDS), [[v.kind, v.text] for v in VECTORS]])
    done = subprocess.run(["node", "--input-type=module", "-e", program], input=sent,
                          capture_output=True, text=True, check=True, timeout=60)
    wrong = [f"{v.label}: wanted {v.error or 'a value'}, got {got or 'a value'}"
             for v, got in zip(VECTORS, json.loads(done.stdout), strict=True)
             if (v.error is None) != (got is None) or (v.error and v.error not in (got or ""))]
    assert wrong == []
