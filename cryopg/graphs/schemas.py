"""JSON Schemas users write (an approval's `fields`, a graph's `input_schema`), kept inert.

A schema is data, never a fetch: every `$ref` must land inside the document (or on a
JSON Schema meta-schema, which ships with jsonschema). The registry below refuses to
retrieve anything else, so neither a URL nor a `file://` path is ever read, and nothing
it would have read can be reflected in an error. At submit, `check` also refuses what
would fail later, when an answer is checked: a meta-schema violation, a `$ref` that does
not resolve or lands on something that is not a schema, a loop of references that never
descends into the instance (`{"$ref": "#"}`), and patterns RE2 cannot run. Each is one
GraphError naming the field, so the server answers 400, never 500.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import jsonschema_specifications
import re2
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import DRAFT202012

from cryopg.graphs.checks import (
    ApprovalValidator,
    GraphError,
    check_patterns,
    find_cycle,
    schema_patterns,
)


def _refuse(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)


# The meta-schemas only; any other URI is refused without being opened.
REGISTRY: Registry[Any] = Registry(retrieve=_refuse).with_resources(  # type: ignore[call-arg]
    (uri, jsonschema_specifications.REGISTRY[uri]) for uri in jsonschema_specifications.REGISTRY)

# Objects in one schema. Checking a schema against the 2020-12 meta-schema costs about a
# millisecond per object here; a form or an input has tens of fields, not thousands.
MAX_OBJECTS = 1000

# Keywords whose subschemas apply to the same instance: a loop through only these (and
# $ref) never ends, whatever the answer.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")


def validator(schema: dict[str, Any]) -> Any:
    """An approval/input validator (RE2 patterns) that resolves references locally only."""
    return ApprovalValidator(schema, registry=REGISTRY)


def check(schema: dict[str, Any], where: str) -> None:
    """A user's JSON Schema, or a GraphError starting with `where` (e.g. "input_schema")."""
    objects, stack = 0, [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            objects += 1
            if objects > MAX_OBJECTS:
                raise GraphError(f"{where}: a schema holds at most {MAX_OBJECTS} objects")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise GraphError(f"{where} is not a JSON Schema: {exc.message}") from None
    except RecursionError:
        raise GraphError(f"{where} is nested too deeply") from None
    try:
        check_patterns("", schema)
    except GraphError as exc:  # said of a node's config.fields; here of `where`
        raise GraphError(f"{where}: {str(exc).split('config.fields: ', 1)[-1]}") from None
    _check_refs(schema, where)


def _subschemas(node: dict[str, Any]) -> Iterator[Any]:
    for value in node.values():
        if isinstance(value, dict):
            yield value
        elif isinstance(value, list):
            yield from value


def _check_refs(schema: dict[str, Any], where: str) -> None:
    """Every $ref / $dynamicRef resolves inside the document (or to a meta-schema), lands
    on a schema, and no loop of references stays at one place in the instance."""
    resolver = REGISTRY.resolver_with_root(DRAFT202012.create_resource(schema))
    seen: dict[int, list[str]] = {}  # id(subschema) -> ids it applies in place
    names: list[str] = []
    stack: list[tuple[Any, Any]] = [(schema, resolver)]
    while stack:
        node, res = stack.pop()
        if isinstance(node, list):
            stack.extend((item, res) for item in node)
            continue
        if not isinstance(node, dict) or id(node) in seen:
            continue
        if isinstance(node.get("$id"), str):
            res = res.in_subresource(DRAFT202012.create_resource(node))
        deps: list[str] = []
        seen[id(node)] = deps
        names.append(str(id(node)))
        for keyword in ("$ref", "$dynamicRef"):
            ref = node.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                got = res.lookup(ref)
            except Unresolvable:
                raise GraphError(f"{where}: {keyword} {ref[:120]!r} does not resolve inside "
                                 "the schema (a reference may not leave the document)") from None
            if not isinstance(got.contents, (dict, bool)):
                raise GraphError(f"{where}: {keyword} {ref[:120]!r} points at something that "
                                 "is not a schema")
            if isinstance(got.contents, dict):
                deps.append(str(id(got.contents)))
                stack.append((got.contents, got.resolver))
        deps.extend(str(id(node[k])) for k in _IN_PLACE_ONE if isinstance(node.get(k), dict))
        for keyword in (*_IN_PLACE_MANY, "dependentSchemas"):
            value = node.get(keyword)
            items = list(value.values()) if isinstance(value, dict) else value
            if isinstance(items, list):
                deps.extend(str(id(item)) for item in items if isinstance(item, dict))
        stack.extend((child, res) for child in _subschemas(node))
    graph = {name: [d for d in seen.get(int(name), []) if int(d) in seen] for name in names}
    if find_cycle(names, graph) is not None:
        raise GraphError(f"{where}: its references loop without ever reaching a value "
                         "(e.g. {\"$ref\": \"#\"})")


def first_error(schema: dict[str, Any], instance: Any) -> str | None:
    """The first way `instance` fails `schema` as one line, or None. A schema stored
    before `check` existed may still hold what it refuses: that is said, not raised."""
    if any(k == "patternProperties" for k, _ in schema_patterns(schema)):
        return "the schema uses patternProperties, which cryopg does not check"
    try:
        errors = sorted(validator(schema).iter_errors(instance), key=lambda e: list(e.path))
    except re2.error:
        return "the schema uses a pattern RE2 cannot run"
    except Unresolvable:
        return "the schema holds a reference that does not resolve inside it"
    except RecursionError:
        return "the schema's references loop, or nest too deeply to check"
    if not errors:
        return None
    where = ".".join(str(p) for p in errors[0].path)
    return f"field {where}: {errors[0].message}" if where else errors[0].message


def input_refusal(structure: dict[str, Any] | None, value: Any) -> str | None:
    """Why `value` may not be the input of a run of the graph whose clear structure is
    `structure` (`input: ` and the schema's message), or None when it may or the graph
    declares no input_schema. The one check every way a run starts goes through: the
    server's routes and triggers (cryopg/server/input_checks.py, off the event loop), a
    workflow node's child, and the driver's first turn of a run that started where
    nothing could check it (an event handler's, an application's cryo.submit_run)."""
    schema = (structure or {}).get("input_schema")
    if not isinstance(schema, dict):
        return None
    error = first_error(schema, {} if value is None else value)
    return None if error is None else f"input: {error}"
