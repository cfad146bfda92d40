"""The expression vectors (tests/expr_vectors.json), read once for the tests that hold
the compiler, SQL and the editor's checker to them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE = Path(__file__).with_name("expr_vectors.json")


@dataclass(frozen=True)
class Vector:
    kind: str  # "expr" or "template"
    text: str
    scope: dict[str, Any]
    value: Any
    error: str | None

    @property
    def label(self) -> str:
        more = f" ({len(self.text)} characters)" if len(self.text) > 60 else ""
        return f"{self.kind} {self.text[:60]!r}{more}"


def load() -> tuple[frozenset[str], list[Vector]]:
    doc = json.loads(FILE.read_text())
    out = []
    for v in doc["vectors"]:
        kind = "expr" if "expr" in v else "template"
        out.append(Vector(kind, v[kind] * v.get("repeat", 1), v.get("scope", doc["scope"]),
                          v.get("value"), v.get("error")))
    return frozenset(doc["node_ids"]), out
