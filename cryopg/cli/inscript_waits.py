"""In-script verbs that wait or start other runs: wait-signal, wait-event, emit, spawn,
activity-submit/-collect/-wait-all, activity, call-graph, call-node, and output set.

Part of the in-script fast path: cheap imports only, like inscript.py; the socket
client both use is inscript_client.py. A wait that has to park never returns: the
agent kills this process with the script, and the run resumes from the top when the
wait is over.
"""

import os

from cryopg.cli import lean
from cryopg.cli.inscript_client import (
    UsageError,
    agent_socket,
    call,
    format_value,
    parse_duration,
    parse_value,
    run_step,
    write_stdout,
)

TIMED_OUT = 124

USAGE = {
    "wait-signal": "usage: cryopg wait-signal NAME [--timeout DURATION]   (exit 124: timed out)",
    "wait-event": ("usage: cryopg wait-event NAME [--timeout DURATION] [--tainted]   "
                   "(exit 124: timed out)\n"
                   "  --tainted  a trusted run hears untrusted runs' NAME events too"),
    "emit": ("usage: cryopg emit NAME [PAYLOAD] [--public]\n"
             "  --public  untrusted runs waiting on NAME hear it too (a trusted run's emit)"),
    "spawn": "usage: cryopg spawn FILE [--input JSON] [--interpreter I]",
    "activity-submit": (
        "usage: cryopg activity-submit NAME [--retries N] [--retry-backoff DURATION]\n"
        "                              [--retry-on-exit CODE[,CODE...]] -- COMMAND [ARG...]"),
    "activity-collect": "usage: cryopg activity-collect NAME",
    "activity-wait-all": "usage: cryopg activity-wait-all",
    "activity": (
        "usage: cryopg activity NAME [--retries N] [--retry-backoff DURATION]\n"
        "                       [--retry-on-exit CODE[,CODE...]] -- COMMAND [ARG...]"),
    "output": "usage: cryopg output set KEY VALUE",
    "lock": "usage: cryopg lock GROUP [-- COMMAND [ARG...]]   (no command: until the run ends)",
    "call-graph": ("usage: cryopg call-graph NAME [--input JSON]   "
                   "(prints the graph's output as JSON)"),
    "call-node": ("usage: cryopg call-node TYPE --config JSON [--input JSON]   "
                  "(prints the node's output as JSON)"),
}


def _flag(args: list[str], name: str) -> tuple[list[str], bool]:
    """Takes a valueless option (a trust opt-in, docs/security/trust.md) out of args."""
    cut = args.index("--") if "--" in args else len(args)
    found = name in args[:cut]
    return [a for i, a in enumerate(args) if i >= cut or a != name], found


def _options(verb: str, args: list[str],
             allowed: dict[str, bool]) -> tuple[list[str], dict[str, str]]:
    """Split positional arguments from --options (each taking a value)."""
    positional: list[str] = []
    options: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and arg != "--":
            name, eq, value = arg.partition("=")
            if name not in allowed:
                raise UsageError(f"unknown option {name}\n{USAGE[verb]}")
            if not eq:
                i += 1
                if i >= len(args):
                    raise UsageError(f"{name} needs a value\n{USAGE[verb]}")
                value = args[i]
            options[name] = value
        else:
            positional.append(arg)
        i += 1
    return positional, options


def _wait(verb: str, args: list[str]) -> int:
    tainted = False
    if verb == "wait-event":
        args, tainted = _flag(args, "--tainted")
    positional, options = _options(verb, args, {"--timeout": True})
    if len(positional) != 1:
        raise UsageError(USAGE[verb])
    timeout = None
    if "--timeout" in options:
        try:
            timeout = parse_duration(options["--timeout"])
        except ValueError as e:
            raise UsageError(str(e)) from None
    op = "wait.signal" if verb == "wait-signal" else "wait.event"
    request: dict[str, object] = {"op": op, "name": positional[0], "timeout": timeout}
    if tainted:
        request["tainted"] = True
    reply = call(agent_socket(verb), request)
    if reply.get("timed_out"):
        return TIMED_OUT
    payload = reply.get("payload")
    if payload is not None:
        write_stdout(format_value(payload) + "\n")
    return 0


def _activity_options(verb: str, args: list[str]) -> tuple[str, dict[str, object], list[str]]:
    if "--" not in args:
        raise UsageError(f"missing '--' before the command\n{USAGE[verb]}")
    cut = args.index("--")
    head, command = args[:cut], args[cut + 1:]
    if not command:
        raise UsageError(f"missing the command after '--'\n{USAGE[verb]}")
    positional, options = _options(
        verb, head, {"--retries": True, "--retry-backoff": True, "--retry-on-exit": True})
    if len(positional) != 1:
        raise UsageError(USAGE[verb])
    policy: dict[str, object] = {}
    try:
        if "--retries" in options:
            policy["retries"] = int(options["--retries"])
            if policy["retries"] < 0:  # type: ignore[operator]
                raise ValueError
        if "--retry-on-exit" in options:
            codes = options["--retry-on-exit"].split(",")
            policy["retry_on"] = [int(c) for c in codes if c.strip()]
    except ValueError:
        raise UsageError(
            "--retries takes a count >= 0 and --retry-on-exit exit codes like 1,75") from None
    if "--retry-backoff" in options:
        try:
            policy["retry_backoff"] = parse_duration(options["--retry-backoff"])
        except ValueError as e:
            raise UsageError(str(e)) from None
    return positional[0], policy, command


def _collect(verb: str, name: str) -> int:
    reply = call(agent_socket(verb), {"op": "activity.collect", "name": name})
    write_stdout(str(reply.get("stdout") or ""))
    return int(reply.get("exit_code") or 0)


def main(verb: str, args: list[str]) -> int:
    if verb in ("wait-signal", "wait-event"):
        return _wait(verb, args)
    if verb == "emit":
        args, public = _flag(args, "--public")
        if len(args) not in (1, 2):
            raise UsageError(USAGE[verb])
        payload = parse_value(args[1]) if len(args) == 2 else None
        request: dict[str, object] = {"op": "emit", "name": args[0], "payload": payload}
        if public:
            request["public"] = True
        call(agent_socket(verb), request)
        return 0
    if verb == "spawn":
        positional, options = _options(verb, args, {"--input": True, "--interpreter": True})
        if len(positional) != 1:
            raise UsageError(USAGE[verb])
        socket_path = agent_socket(verb)
        child_input = None
        if "--input" in options:
            import json  # for its error messages; rare enough to pay its import

            try:
                child_input = json.loads(options["--input"])
            except ValueError as e:
                raise UsageError(f"--input is not valid JSON: {e}") from None
        try:
            with open(positional[0], encoding="utf-8") as fh:
                source = fh.read()
        except OSError as e:
            raise UsageError(f"cannot read {positional[0]}: {e.strerror or e}") from None
        reply = call(socket_path, {"op": "spawn", "filename": os.path.basename(positional[0]),
                                    "source": source, "input": child_input,
                                    "interpreter": options.get("--interpreter")})
        write_stdout(f"{reply.get('run_id')}\n")
        return 0
    if verb in ("activity-submit", "activity"):
        name, policy, command = _activity_options(verb, args)
        socket_path = agent_socket(verb)
        reply = call(socket_path, {"op": "activity.submit", "name": name, "argv": command,
                                    **policy})
        if verb == "activity-submit":
            write_stdout(f"{reply.get('run_id')}\n")
            return 0
        return _collect(verb, name)
    if verb == "activity-collect":
        if len(args) != 1:
            raise UsageError(USAGE[verb])
        return _collect(verb, args[0])
    if verb == "activity-wait-all":
        if args:
            raise UsageError(USAGE[verb])
        reply = call(agent_socket(verb), {"op": "activity.wait-all"})
        write_stdout(f"{reply.get('failed')}\n")
        return 0
    if verb == "lock":
        return _lock(args)
    if verb in ("call-graph", "call-node"):
        return _call_graph(verb, args)
    if len(args) != 3 or args[0] != "set":
        raise UsageError(USAGE["output"])
    call(agent_socket(verb), {"op": "output.set", "key": args[1], "value": parse_value(args[2])})
    return 0


def _json_option(verb: str, options: dict[str, str], name: str) -> object:
    try:
        return lean.loads(options[name])
    except ValueError:
        raise UsageError(f"{name} is not valid JSON\n{USAGE[verb]}") from None


def _call_graph(verb: str, args: list[str]) -> int:
    """`call-graph NAME` runs a stored graph, `call-node TYPE --config J` one node, as a
    child graph run; the first pass parks until it ends, and every pass prints its output.
    A child that failed fails the verb (exit 1) with its error."""
    allowed = {"--input": True, **({"--config": True} if verb == "call-node" else {})}
    positional, options = _options(verb, args, allowed)
    if len(positional) != 1 or not positional[0]:
        raise UsageError(USAGE[verb])
    child_input = _json_option(verb, options, "--input") if "--input" in options else None
    if verb == "call-graph":
        request: dict[str, object] = {"op": "graph.call", "name": positional[0],
                                      "input": child_input}
    else:
        if "--config" not in options:
            raise UsageError(f"--config is required\n{USAGE[verb]}")
        config = _json_option(verb, options, "--config")
        if not isinstance(config, dict):
            raise UsageError(f"--config must be a JSON object\n{USAGE[verb]}")
        request = {"op": "node.call", "type": positional[0], "config": config,
                   "input": child_input}
    reply = call(agent_socket(verb), request)
    write_stdout(lean.dumps(reply.get("output"), compact=True) + "\n")
    return 0


def _lock(args: list[str]) -> int:
    """`lock GROUP`: the lease until the run ends. `lock GROUP -- CMD`: CMD runs holding
    it, as a step (recorded, so a replay does not run CMD again), then it is released."""
    cut = args.index("--") if "--" in args else len(args)
    head, command = args[:cut], args[cut + 1:]
    if len(head) != 1 or (cut < len(args) and not command):
        raise UsageError(USAGE["lock"])
    group = head[0]
    socket_path = agent_socket("lock")
    call(socket_path, {"op": "lock.acquire", "group": group, "scoped": bool(command)})
    if not command:
        return 0
    try:
        return run_step(socket_path, f"lock:{group}", None, [], command)
    finally:
        call(socket_path, {"op": "lock.release", "group": group})
