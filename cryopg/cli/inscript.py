"""In-script verbs (`cryopg step|sleep|annotate|state`): one request each to the agent socket.

This is a hot path -- a bash workflow may run thousands of these -- so it imports only
what starts in no time: json, socket and subprocess come through lean.py.
"""

import os
import sys
import time

from cryopg.cli import lean

# Verbs of inscript_waits.py, listed here so dispatching never imports that module early.
WAIT_VERBS = frozenset({"wait-signal", "wait-event", "emit", "spawn", "activity-submit",
                        "activity-collect", "activity-wait-all", "activity", "output",
                        "lock"})
IN_SCRIPT_VERBS = frozenset({"step", "sleep", "annotate", "state"}) | WAIT_VERBS

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

USAGE = {
    "step": "usage: cryopg step NAME [--label LABEL] [--secret NAME...] -- COMMAND [ARG...]",
    "sleep": "usage: cryopg sleep DURATION   (e.g. 30s, 5m, 1.5h, 1d, 500ms, 10)",
    "annotate": "usage: cryopg annotate TEXT",
    "state": (
        "usage: cryopg state get KEY [--version] | version KEY | set KEY VALUE\n"
        "                    | delete KEY | list | add KEY [VALUE]\n"
        "                    | cas KEY VALUE --expect VERSION [--as NAME]\n"
        "                    | incr KEY [--by N] [--as NAME]\n"
        "       each takes --entity NAME; outside a run: get|version|list with --run RUN"
    ),
}

# `state` exit codes beyond 0 / 1 / 2: the cell was someone else's (add) or moved (cas).
LOST = 3
_STATE_OPS = ("get", "version", "set", "delete", "list", "add", "cas", "incr")
# Options each state operation takes, and whether they take a value.
_STATE_OPTIONS: dict[str, dict[str, bool]] = {
    "get": {"--entity": True, "--version": False},
    "version": {"--entity": True},
    "set": {"--entity": True},
    "delete": {"--entity": True},
    "list": {"--entity": True},
    "add": {"--entity": True},
    "cas": {"--entity": True, "--expect": True, "--as": True, "--op": True},
    "incr": {"--entity": True, "--by": True, "--as": True, "--op": True},
}
_STATE_ARITY = {"get": (1, 1), "version": (1, 1), "set": (2, 2), "delete": (1, 1),
                "list": (0, 0), "add": (1, 2), "cas": (2, 2), "incr": (1, 1)}


class UsageError(Exception):
    pass


class AgentError(Exception):
    pass


def parse_duration(text: str) -> float:
    """'2s', '5m', '1h', '1d', '1.5s', '500ms' or a bare number of seconds -> seconds."""
    raw = str(text).strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h", "d") if raw.endswith(u)), "")
    number = raw[: len(raw) - len(unit)].strip()
    # Digits and at most one dot only: rejects '', '-1', 'inf', 'nan', '1e3', '1h30m'.
    if number.replace(".", "", 1).isdigit() and number.isascii():
        return float(number) * _UNITS.get(unit, 1.0)
    raise ValueError(
        f"invalid duration {text!r}: expected a non-negative number with an optional "
        "unit ms, s, m, h or d (e.g. 30s, 5m, 1.5h, 500ms)"
    )


def state_goes_to_server(argv: list[str]) -> bool:
    """`state` asked outside a run, or about a named run, is answered by the server over
    HTTP (the click CLI); inside a run the socket answers and click is never imported."""
    if not argv or argv[0] != "state":
        return False
    if not os.environ.get("CRYO_SOCKET"):
        return True
    return any(a == "--run" or a.startswith("--run=") for a in argv[1:])


def parse_value(text: str) -> object:
    """A VALUE that is JSON is that JSON; anything else is the string itself."""
    def refuse(constant: str) -> object:
        raise ValueError(constant)  # NaN / Infinity are not JSON

    try:
        return lean.loads(text, parse_constant=refuse)
    except ValueError:
        return text


def format_value(value: object) -> str:
    """How `state get` prints a value: a string bare, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return lean.dumps(value, compact=True)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in IN_SCRIPT_VERBS:
        verbs = ", ".join(sorted(IN_SCRIPT_VERBS))
        print(f"cryopg: expected an in-script verb ({verbs})", file=sys.stderr)
        return 2
    verb, args = argv[0], argv[1:]
    if verb in WAIT_VERBS:
        from cryopg.cli import inscript_waits

        usage = inscript_waits.USAGE
    else:
        usage = USAGE
    if args[:1] in (["-h"], ["--help"]):
        print(usage[verb])
        return 0
    try:
        if verb in WAIT_VERBS:
            return inscript_waits.main(verb, args)
        if verb == "state":
            return _state(args)
        if verb == "step":
            name, label, needs, command = _parse_step(args)
            socket_path = _socket_path(verb)
            return _step(socket_path, name, label, needs, command)
        if verb == "sleep":
            if len(args) != 1:
                raise UsageError(USAGE["sleep"])
            try:
                seconds = parse_duration(args[0])
            except ValueError as e:
                raise UsageError(str(e)) from None
            _call(_socket_path(verb), {"op": "sleep", "seconds": seconds})
            return 0
        if len(args) != 1:
            raise UsageError(USAGE["annotate"])
        _call(_socket_path(verb), {"op": "annotate", "text": args[0]})
        return 0
    except UsageError as e:
        print(f"cryopg {verb}: {e}", file=sys.stderr)
        return 2
    except AgentError as e:
        print(f"cryopg {verb}: {e}", file=sys.stderr)
        return 1


def _parse_step(args: list[str]) -> tuple[str, str | None, list[str], list[str]]:
    """(name, label, secrets the step needs, command)."""
    if "--" not in args:
        raise UsageError(f"missing '--' before the command\n{USAGE['step']}")
    cut = args.index("--")
    head, command = args[:cut], args[cut + 1 :]
    name: str | None = None
    label: str | None = None
    needs: list[str] = []
    i = 0
    while i < len(head):
        arg = head[i]
        if arg in ("--label", "--secret"):
            if i + 1 >= len(head):
                raise UsageError(f"{arg} needs a value")
            if arg == "--label":
                label = head[i + 1]
            else:
                needs.append(head[i + 1])
            i += 2
            continue
        if arg.startswith("--label="):
            label = arg[len("--label=") :]
        elif arg.startswith("--secret="):
            needs.append(arg[len("--secret=") :])
        elif arg.startswith("-") and arg != "-":
            raise UsageError(f"unknown option {arg}\n{USAGE['step']}")
        elif name is None:
            name = arg
        else:
            raise UsageError(f"unexpected argument {arg!r}\n{USAGE['step']}")
        i += 1
    if not name:
        raise UsageError(f"missing step NAME\n{USAGE['step']}")
    if not command:
        raise UsageError(f"missing COMMAND after '--'\n{USAGE['step']}")
    return name, label, needs, command


def _parse_state(args: list[str]) -> tuple[str, list[str], dict[str, str | bool]]:
    if not args or args[0] not in _STATE_OPS:
        raise UsageError(USAGE["state"])
    op, rest = args[0], args[1:]
    allowed = _STATE_OPTIONS[op]
    positional: list[str] = []
    options: dict[str, str | bool] = {}
    i = 0
    while i < len(rest):
        arg = rest[i]
        i += 1
        if arg == "--":
            positional.extend(rest[i:])
            break
        if not arg.startswith("--"):
            positional.append(arg)  # "-5" is a value, not an option
            continue
        name, eq, inline = arg.partition("=")
        if name == "--run":
            raise UsageError("--run reads another run's cells from outside a run")
        if name not in allowed:
            raise UsageError(f"unknown option {name} for state {op}\n{USAGE['state']}")
        if not allowed[name]:
            options[name] = True
            continue
        if not eq:
            if i >= len(rest):
                raise UsageError(f"{name} needs a value")
            inline = rest[i]
            i += 1
        options["--as" if name == "--op" else name] = inline
    low, high = _STATE_ARITY[op]
    if not low <= len(positional) <= high:
        raise UsageError(f"wrong number of arguments for state {op}\n{USAGE['state']}")
    if op == "version":
        op, options["--version"] = "get", True
    return op, positional, options


def _state(args: list[str]) -> int:
    op, positional, options = _parse_state(args)
    entity = options.get("--entity")
    if entity == "":
        raise UsageError("--entity needs a non-empty name")
    request: dict[str, object] = {"op": f"state.{op}", "entity": entity}
    if positional:
        request["key"] = positional[0]
    if "--as" in options:
        request["as"] = options["--as"]
    if op in ("set", "cas") or (op == "add" and len(positional) == 2):
        request["value"] = parse_value(positional[1])
    if op == "cas":
        expect = str(options.get("--expect", ""))
        if not expect.isdigit() or int(expect) < 1:
            raise UsageError("cas needs --expect VERSION, the version `state get KEY --version` "
                             "printed (>= 1); to create a cell only if absent use state add")
        request["expect"] = int(expect)
    if op == "incr" and "--by" in options:
        by = parse_value(str(options["--by"]))
        if not isinstance(by, (int, float)) or isinstance(by, bool) or by != by:
            raise UsageError(f"--by needs a number, not {options['--by']!r}")
        request["by"] = by
    reply = _call(_socket_path("state"), request)
    if op == "get":
        if reply.get("found"):
            shown = reply.get("version") if options.get("--version") else reply.get("value")
            print(format_value(shown))
        return 0
    if op == "list":
        cells = reply.get("cells")
        for cell in cells if isinstance(cells, list) else []:
            print(f"{cell['key']}\t{format_value(cell['value'])}\t{cell['version']}")
        return 0
    if op == "add":
        return 0 if reply.get("claimed") else LOST
    if op == "cas":
        return 0 if reply.get("swapped") else LOST
    if op == "incr":
        print(format_value(reply.get("value")))
    return 0


def _socket_path(verb: str) -> str:
    path = os.environ.get("CRYO_SOCKET")
    if not path:
        raise UsageError("not inside a run (CRYO_SOCKET is not set)")
    return path


def _step(socket_path: str, name: str, label: str | None, needs: list[str],
          command: list[str]) -> int:
    request: dict[str, object] = {"op": "step.begin", "name": name, "label": label}
    if needs:  # the agent fails the run when one was withheld or is not set
        request["secrets"] = needs
    reply = _call(socket_path, request)
    if reply.get("hit"):
        _write_stdout(reply.get("stdout") or "")
        return int(reply.get("exit_code") or 0)

    # The body gets no agent handles (a nested verb must fail loudly), only its key.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYO_")}
    env["CRYO_IDEMPOTENCY_KEY"] = str(reply.get("idempotency_key") or "")
    try:
        raw, code = lean.run_captured(command, env)
        if code < 0:
            code = 128 - code  # killed by signal N -> 128+N, as a shell reports it
    except FileNotFoundError:
        print(f"cryopg step: command not found: {command[0]}", file=sys.stderr)
        raw, code = b"", 127
    except PermissionError:
        print(f"cryopg step: permission denied: {command[0]}", file=sys.stderr)
        raw, code = b"", 126
    # Recorded as text; replays print the recorded text, so this pass prints it too.
    stdout = raw.decode("utf-8", errors="replace")
    _call(
        socket_path,
        {"op": "step.finish", "call_id": reply.get("call_id"), "stdout": stdout, "exit_code": code},
    )
    _write_stdout(stdout)
    return code


def _write_stdout(text: str) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.buffer.flush()


def _call(socket_path: str, request: dict[str, object]) -> dict[str, object]:
    """Send one request line and read one reply line; raise AgentError on any failure."""
    sock = _connect(socket_path)
    try:
        sock.sendall(lean.dumps(request).encode("utf-8") + b"\n")
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                break
    except OSError as e:
        raise AgentError(f"lost the agent connection ({e.strerror or e})") from None
    finally:
        sock.close()
    data = b"".join(chunks)
    if not data.strip():
        raise AgentError("the agent closed the connection without a reply")
    try:
        reply = lean.loads(data)
    except ValueError:
        raise AgentError("the agent sent a malformed reply") from None
    if not isinstance(reply, dict):
        raise AgentError("the agent sent a malformed reply")
    if not reply.get("ok"):
        err = reply.get("error")
        message = err.get("message") if isinstance(err, dict) else None
        raise AgentError(str(message or "the agent refused the request"))
    return reply


def _connect(socket_path: str) -> lean.Socket:
    # Only connecting is retried (an agent may be busy accepting); a sent request never is.
    attempts = max(1, _int_env("CRYO_CONNECT_ATTEMPTS", 3))
    backoff = _int_env("CRYO_CONNECT_BACKOFF_MS", 50) / 1000
    for attempt in range(attempts):
        sock = lean.unix_socket()
        try:
            sock.connect(socket_path)
            return sock
        except OSError as e:
            sock.close()
            transient = isinstance(e, (ConnectionRefusedError, BlockingIOError))
            if not transient or attempt + 1 == attempts:
                raise AgentError(
                    f"cannot reach the agent at {socket_path} ({e.strerror or e})"
                ) from None
            time.sleep(backoff * (2**attempt))
    raise AssertionError("unreachable")


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return default


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
