"""Graph expressions: parsed here at submit (so a bad one is refused before anything is
stored), evaluated in SQL (cryo._eval) over the scope the driver unseals.

Grammar:
    expr    := or
    or      := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | compare
    compare := operand (("==" | "!=" | "<" | "<=" | ">" | ">=") operand)?
    operand := literal | path | "(" expr ")"
    literal := number | 'text' | "text" | true | false | null
    path    := name ("." (name | digits) | "[" digits "]")*
A path starts at input, nodes, node, item, item_index, run or trigger; nodes.<id> must
name a node of the graph, followed by .output or .status. A template is text with
{{ expr }} holes; a value that is not a string is written as JSON.

Bounds (a clear ExprError past them, never a RecursionError or a long parse): an
expression is at most MAX_EXPR characters, nests at most MAX_NESTING deep (parentheses,
`not`, and `and`/`or` chains all count, since SQL evaluates the tree recursively), and a
number literal has at most MAX_NUMBER characters and must fit 64 bits; a template is at
most MAX_TEMPLATE characters with at most MAX_HOLES holes.
"""

from __future__ import annotations

import re
from typing import Any

MAX_EXPR = 2000
MAX_NESTING = 32
MAX_NUMBER = 32
MAX_TEMPLATE = 1 << 20  # a shell node's whole script may be a template
MAX_HOLES = 1000
ROOTS = frozenset({"input", "nodes", "node", "item", "item_index", "run", "trigger"})
COMPARE = ("==", "!=", "<=", ">=", "<", ">")
_TOKEN = re.compile(r"""\s*(?:
    (?P<num>-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<op>==|!=|<=|>=|<|>|\(|\)|\.|\[|\])
  | (?P<name>[A-Za-z_][A-Za-z0-9_-]*)
)""", re.X)


class ExprError(ValueError):
    """An expression that does not parse, or names what does not exist."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExprError(f"cannot read {text[pos:pos + 12]!r} in {_short(text)}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _number(val: str) -> int | float:
    if len(val) > MAX_NUMBER:
        raise ExprError(f"number {val[:16]}... is longer than {MAX_NUMBER} characters")
    if any(c in val for c in ".eE"):
        number = float(val)
        if number - number != 0.0:
            raise ExprError(f"number {val} is too large")
        return number
    if not -(2**63) <= (whole := int(val)) < 2**63:
        raise ExprError(f"integer {val} does not fit 64 bits")
    return whole


class _Parser:
    def __init__(self, text: str, node_ids: frozenset[str],
                 roots: frozenset[str] = ROOTS) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.node_ids = node_ids
        self.roots = roots
        self.depth = 0

    def nest(self, by: int = 1) -> None:
        """Counts one level down the tree (undone by the caller when it returns)."""
        self.depth += by
        if self.depth > MAX_NESTING:
            raise ExprError(f"an expression nests deeper than {MAX_NESTING} levels")

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise ExprError(f"{_short(self.text)} ends too soon")
        self.i += 1
        return tok

    def word(self, w: str) -> bool:
        tok = self.peek()
        if tok == ("name", w):
            self.i += 1
            return True
        return False

    def parse(self) -> dict[str, Any]:
        if not self.toks:
            raise ExprError("an expression cannot be empty")
        e = self.or_()
        if self.peek() is not None:
            raise ExprError(f"unexpected {self.peek()[1]!r} in {_short(self.text)}")  # type: ignore[index]
        return e

    def or_(self) -> dict[str, Any]:
        return self.chain("or", self.and_)

    def and_(self) -> dict[str, Any]:
        return self.chain("and", self.not_)

    def chain(self, op: str, term: Any) -> dict[str, Any]:
        # a or b or c is ((a or b) or c): each link is one more level of the tree.
        start = self.depth
        e = term()
        while self.word(op):
            self.nest()
            e = {"op": op, "a": e, "b": term()}
        self.depth = start
        return e

    def not_(self) -> dict[str, Any]:
        if self.word("not"):
            self.nest()
            e = {"op": "not", "a": self.not_()}
            self.depth -= 1
            return e
        return self.compare()

    def compare(self) -> dict[str, Any]:
        a = self.operand()
        tok = self.peek()
        if tok and tok[0] == "op" and tok[1] in COMPARE:
            self.i += 1
            return {"op": tok[1], "a": a, "b": self.operand()}
        return a

    def operand(self) -> dict[str, Any]:
        kind, val = self.take()
        if kind == "num":
            return {"lit": _number(val)}
        if kind == "str":
            return {"lit": re.sub(r"\\(.)", r"\1", val[1:-1])}
        if (kind, val) == ("op", "("):
            self.nest()
            e = self.or_()
            if self.take() != ("op", ")"):
                raise ExprError(f"a '(' is not closed in {_short(self.text)}")
            self.depth -= 1
            return e
        if kind == "name":
            if val in ("true", "false", "null"):
                return {"lit": {"true": True, "false": False, "null": None}[val]}
            return self.path(val)
        raise ExprError(f"unexpected {val!r} in {_short(self.text)}")

    def path(self, root: str) -> dict[str, Any]:
        if root not in self.roots:
            raise ExprError(f"{root!r} is not in scope (use {', '.join(sorted(self.roots))})")
        parts: list[str] = [root]
        while True:
            tok = self.peek()
            if tok == ("op", "."):
                self.i += 1
                kind, val = self.take()
                if kind not in ("name", "num") or (kind == "num" and not val.isdigit()):
                    raise ExprError(f"a name must follow '.' in {_short(self.text)}")
                parts.append(val)
            elif tok == ("op", "["):
                self.i += 1
                kind, val = self.take()
                if kind != "num" or not val.isdigit() or self.take() != ("op", "]"):
                    raise ExprError(f"[...] takes a list index in {_short(self.text)}")
                parts.append(val)
            else:
                break
        if root == "nodes":
            if len(parts) < 3:
                raise ExprError(f"nodes.<id>.output or nodes.<id>.status, in {_short(self.text)}")
            if parts[1] not in self.node_ids:
                raise ExprError(f"no node {parts[1]!r} in this graph")
            if parts[2] not in ("output", "status"):
                raise ExprError(f"nodes.{parts[1]} has output and status, not {parts[2]!r}")
        return {"path": parts}


def parse(text: Any, node_ids: frozenset[str], roots: frozenset[str] = ROOTS) -> dict[str, Any]:
    """The compiled form of one expression (reading only `roots`: a retry_if reads
    failure only)."""
    if not isinstance(text, str):
        raise ExprError("an expression must be a string")
    if len(text) > MAX_EXPR:
        raise ExprError(f"an expression is at most {MAX_EXPR} characters")
    return _Parser(text, node_ids, roots).parse()


def _short(text: str) -> str:
    """An expression quoted in an error, cut so the error stays one short line."""
    return repr(text if len(text) <= 80 else text[:80] + "...")


# A hole: {{ expr }}, where a quoted text inside may hold braces, so literal braces are
# written {{ '{{' }} and {{ '}}' }} (as in Helm). A lone }} outside a hole is text (JSON
# in a shell command has plenty); a {{ that never closes is an error.
_HOLE = re.compile(r"""\{\{((?:[^}'"]|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\}(?!\}))*)\}\}""",
                   re.S)


def parse_template(text: Any, node_ids: frozenset[str]) -> dict[str, Any]:
    """The compiled form of a template: text with {{ expr }} holes."""
    if not isinstance(text, str):
        raise ExprError("a template must be a string")
    if len(text) > MAX_TEMPLATE:
        raise ExprError(f"a template is at most {MAX_TEMPLATE} characters")
    parts: list[Any] = []
    holes = 0
    pos = 0
    # Each {{ must open a hole right there: matching only at the next {{ (rather than
    # searching the rest of the text from every position) keeps this linear.
    while (start := text.find("{{", pos)) >= 0:
        m = _HOLE.match(text, start)
        if m is None:
            raise ExprError(f"unbalanced {{{{ }}}} in template {_short(text[start:])}")
        holes += 1
        if holes > MAX_HOLES:
            raise ExprError(f"a template has at most {MAX_HOLES} {{{{ }}}} holes")
        if start > pos:
            parts.append(text[pos:start])
        parts.append(parse(m.group(1).strip(), node_ids))
        pos = m.end()
    if pos < len(text):
        parts.append(text[pos:])
    return {"tpl": parts}


def paths(ast: Any) -> list[list[str]]:
    """Every path an expression or template reads."""
    if isinstance(ast, dict):
        if "path" in ast:
            return [ast["path"]]
        return [p for v in ast.values() for p in paths(v)]
    if isinstance(ast, list):
        return [p for v in ast for p in paths(v)]
    return []
