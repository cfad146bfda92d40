"""One pipeline job to one graph node.

A job has exactly one kind key, which picks the node type and its config; the other keys
(`if`, `retry`, `concurrency`, `fan_out`, `loop`, `stop_if`, `cache`) are the node's own
fields, and `needs` becomes edges (made by the caller). Text holding `{{ ... }}` becomes
a graph template, so `{{ input.x }}` and `{{ item }}` work wherever a value may be one.
"""

from __future__ import annotations

import re
from typing import Any

KINDS = {  # job key -> graph node type
    "steps": "shell", "script": "script", "approval": "approval",
    "wait_for_event": "wait", "wait_for_signal": "wait", "sleep": "wait",
    "state": "state", "http": "http", "connector": "connector", "workflow": "workflow"}
NODE_FIELDS = ("if", "retry", "concurrency", "fan_out", "continue_on_error", "always",
               "loop", "stop_if", "cache", "timeout")
JOB_KEYS = frozenset({*KINDS, *NODE_FIELDS, "needs", "env", "input", "artifacts"})
ARTIFACT_KINDS = ("steps", "script")  # the jobs that run a command an agent can wrap
STATE_KEYS = frozenset({"op", "key", "value", "entity", "expected", "by"})
HTTP_KEYS = frozenset({"method", "url", "headers", "body"})
CONNECTOR_KEYS = frozenset({"connection", "method", "path", "query", "headers", "body"})
_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class JobError(ValueError):
    """Raised as "<key>: <what>"; the caller prefixes the job."""


def templated(value: Any) -> Any:
    """Text with {{ }} holes as a graph template; objects and lists walked; the rest kept.
    An explicit {"$expr": ...} or {"$template": ...} passes through as it is."""
    if isinstance(value, str):
        return {"$template": value} if "{{" in value else value
    if isinstance(value, dict):
        if set(value) & {"$expr", "$template"}:
            return value
        return {k: templated(v) for k, v in value.items()}
    if isinstance(value, list):
        return [templated(v) for v in value]
    return value


def kind_of(job: dict[str, Any]) -> str:
    found = [k for k in KINDS if k in job]
    if len(found) != 1:
        got = " and ".join(found) if found else "none"
        raise JobError(f"{'/'.join(KINDS)}: a job has exactly one of these (found {got})")
    return found[0]


def env_map(value: Any, where: str) -> dict[str, Any]:
    """An env mapping: variable names to text (numbers and booleans written as text)."""
    if not isinstance(value, dict):
        raise JobError(f"{where}: must be a mapping of variable names to values")
    out: dict[str, Any] = {}
    for k, v in value.items():
        if not _VAR.match(k):
            raise JobError(f"{where}: {k!r} is not a variable name")
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (int, float)):
            v = str(v)
        elif not isinstance(v, str):
            raise JobError(f"{where}.{k}: must be text, a number or a boolean")
        out[k] = v
    return out


def node_of(job_id: str, job: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """The graph node of a checked job, without its edges. `env` is the pipeline's."""
    unknown = sorted(set(job) - JOB_KEYS)
    if unknown:
        raise JobError(f"{unknown[0]}: unknown key (a job takes {', '.join(sorted(JOB_KEYS))})")
    kind = kind_of(job)
    node: dict[str, Any] = {"id": job_id, "type": KINDS[kind]}
    for field in NODE_FIELDS:
        if field in job:
            value = job[field]
            if field == "if" and isinstance(value, bool):  # `if: false` in YAML
                value = "true" if value else "false"
            node[field] = value
    if "env" in job and kind != "steps":
        raise JobError("env: only a job with steps has an environment (give a "
                       f"{kind} job its values with input)")
    if "input" in job and kind not in ("script", "workflow"):
        raise JobError(f"input: only script and workflow jobs take input (this is a {kind} job)")
    node["config"] = _CONFIG[kind](job[kind], job, env)
    if "artifacts" in job:
        if kind not in ARTIFACT_KINDS:
            raise JobError(f"artifacts: only steps and script jobs upload artifacts (this is "
                           f"a {kind} job)")
        node["config"]["artifacts"] = job["artifacts"]  # checked by the graph tier
    return node


def _steps(value: Any, job: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise JobError("steps: must be a list of steps, each {run: COMMAND}")
    lines = []
    for i, step in enumerate(value):
        if isinstance(step, str):
            step = {"run": step}
        if not isinstance(step, dict) or "run" not in step or set(step) - {"run", "name"}:
            raise JobError(f"steps[{i}]: a step is {{run: COMMAND}} (with an optional name)")
        if not isinstance(step["run"], str) or not step["run"].strip():
            raise JobError(f"steps[{i}].run: must be a command (text)")
        name = step.get("name")
        if name is not None and (not isinstance(name, str) or "\n" in name):
            raise JobError(f"steps[{i}].name: must be one line of text")
        lines.append(f"# step {i + 1}" + (f": {name}" if name else ""))
        lines.append(step["run"].rstrip("\n"))
    config: dict[str, Any] = {"run": templated("\n".join(lines))}
    merged = {**env, **env_map(job.get("env", {}), "env")}
    if merged:
        config["env"] = templated(merged)
    return config


def _script(value: Any, job: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, str):
        config: dict[str, Any] = {"workflow": value}
    elif isinstance(value, dict):
        extra = sorted(set(value) - {"source", "filename", "interpreter"})
        if extra or not isinstance(value.get("source"), str) or not isinstance(
                value.get("filename"), str):
            raise JobError("script: a stored workflow's name, or {source, filename} "
                           "(with an optional interpreter)")
        config = dict(value)
    else:
        raise JobError("script: a stored workflow's name, or {source, filename}")
    if "input" in job:
        config["input"] = templated(job["input"])
    return config


def _workflow(value: Any, job: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, str) or not value:
        raise JobError("workflow: the name of a stored graph or pipeline")
    config: dict[str, Any] = {"graph": value}
    if "input" in job:
        config["input"] = templated(job["input"])
    return config


APPROVAL_KEYS = frozenset({"fields", "approvers", "role", "group", "timeout", "on_timeout"})


def _approval(value: Any, job: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, dict) or "fields" not in value or set(value) - APPROVAL_KEYS:
        raise JobError("approval: must be {fields: JSON Schema, approvers, role, group, "
                       "timeout, on_timeout}")
    return dict(value)  # the graph tier's approval node checks each key


def _wait_named(kind: str, config_key: str):  # type: ignore[no-untyped-def]
    def build(value: Any, job: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, dict) or "name" not in value or set(value) - {"name", "timeout"}:
            raise JobError(f"{kind}: a name, or {{name, timeout}}")
        if not isinstance(value["name"], str) or not value["name"]:
            raise JobError(f"{kind}.name: must be a name")
        config = {config_key: value["name"]}
        if "timeout" in value:
            config["timeout"] = value["timeout"]
        return config
    return build


def _sleep(value: Any, job: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    return {"sleep": value}


def _state(value: Any, job: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise JobError("state: must be {op, key, ...}")
    extra = sorted(set(value) - STATE_KEYS)
    if extra:
        raise JobError(f"state.{extra[0]}: unknown key "
                       f"(state takes {', '.join(sorted(STATE_KEYS))})")
    return templated(value)


def _http(value: Any, job: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, str):
        value = {"url": value}
    if not isinstance(value, dict):
        raise JobError("http: must be a URL or {method, url, headers, body}")
    extra = sorted(set(value) - HTTP_KEYS)
    if extra:
        raise JobError(f"http.{extra[0]}: unknown key (http takes {', '.join(sorted(HTTP_KEYS))})")
    return templated(value)


def _connector(value: Any, job: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """A request to a stored connection of the project: the connector node's config. Its
    name stays literal (the grant reads it to give that connection's secret, and only
    that one, to the agent making the request); the rest may hold templates."""
    if isinstance(value, str):
        value = {"connection": value}
    if not isinstance(value, dict) or "connection" not in value:
        raise JobError("connector: a connection's name, or {connection, method, path, query, "
                       "headers, body}")
    extra = sorted(set(value) - CONNECTOR_KEYS)
    if extra:
        raise JobError(f"connector.{extra[0]}: unknown key (connector takes "
                       f"{', '.join(sorted(CONNECTOR_KEYS))})")
    name = value["connection"]
    if not isinstance(name, str) or "{{" in name:
        raise JobError("connector.connection: must be a connection's name, given literally")
    return {"connection": name,
            **templated({k: v for k, v in value.items() if k != "connection"})}


_CONFIG = {"steps": _steps, "script": _script, "workflow": _workflow, "approval": _approval,
           "wait_for_event": _wait_named("wait_for_event", "event"),
           "wait_for_signal": _wait_named("wait_for_signal", "signal"),
           "sleep": _sleep, "state": _state, "http": _http, "connector": _connector}
