"""In-script verbs (`cryopg step|sleep|annotate|state`): one request each to the agent socket.

This is a hot path -- a bash workflow may run thousands of these -- so it imports only
what starts in no time: the socket client in inscript_client.py, whose json, socket
and subprocess come through lean.py.
"""

import os
import sys

from cryopg.cli.inscript_client import (
    AgentError,
    UsageError,
    agent_socket,
    call,
    format_value,
    inside_run,
    parse_duration,
    parse_value,
    run_step,
)
from cryopg.cli.verbs import IN_SCRIPT_VERBS, WAIT_VERBS  # the one list

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

# Each state operation's own help, the same inside a run and outside one (where click
# shows it for the operation; outside a run only get, version and list are served).
_SCOPE = ("  --entity NAME   the project's entity scope NAME (default: this run's own cells)\n"
          "  --run RUN       outside a run: read RUN's cells (get, version, list only)\n")
_TAINTED = ("  --tainted       an entity's cells untrusted runs wrote, not the trusted ones\n"
            "                  (a trusted run's opt-in; docs/security/trust.md)\n")
_AS = ("  --as NAME       the call's name in the journal (default: KEY); a run uses a name\n"
       "                  once, so give each attempt in a loop its own (--op is an alias)\n")
STATE_HELP = {
    "get": "usage: cryopg state get KEY [--version] [--entity NAME | --run RUN] [--tainted]\n"
           "Print a cell's value (strings bare, else compact JSON); nothing when unset.\n"
           "  --version       print the cell's version instead\n" + _SCOPE + _TAINTED,
    "version": "usage: cryopg state version KEY [--entity NAME | --run RUN] [--tainted]\n"
               "Print a cell's version (as `state get KEY --version`).\n" + _SCOPE + _TAINTED,
    "list": "usage: cryopg state list [--entity NAME | --run RUN] [--tainted]\n"
            "Print key<TAB>value<TAB>version for every cell of the scope.\n" + _SCOPE + _TAINTED,
    "set": "usage: cryopg state set KEY VALUE [--entity NAME] [--public]\n"
           "Write a cell (inside a run). VALUE is JSON when it parses as JSON, else the\n"
           "string itself; text starting with { [ or \" that is not valid JSON is refused.\n"
           "  --public        untrusted runs may read the cell (a trusted run's write; a\n"
           "                  set without it withdraws that)\n"
           + _SCOPE,
    "delete": "usage: cryopg state delete KEY [--entity NAME]\n"
              "Delete a cell (inside a run).\n" + _SCOPE,
    "add": "usage: cryopg state add KEY [VALUE] [--entity NAME]\n"
           "Claim a cell only if nothing holds it (inside a run): exit 0 when this run\n"
           "holds it, 3 when another does, 1 when something broke. Recorded: a replay gets\n"
           "the same answer; a retried activity still holds what it claimed.\n" + _SCOPE,
    "cas": "usage: cryopg state cas KEY VALUE --expect VERSION [--as NAME] [--entity NAME]\n"
           "Swap the value only if the cell is still at VERSION (inside a run): exit 0 when\n"
           "swapped, 3 when it moved. Recorded under --as: a replay gets the same answer.\n"
           "  --expect VERSION the version `state get KEY --version` printed (>= 1)\n"
           + _AS + _SCOPE,
    "incr": "usage: cryopg state incr KEY [--by N] [--as NAME] [--entity NAME]\n"
            "Add N (default 1) to a numeric cell and print the new total (inside a run).\n"
            "Recorded under --as: a replay prints the same total and adds nothing.\n"
            "  --by N          the amount, any finite number (default 1)\n" + _AS + _SCOPE,
}

# `state` exit codes beyond 0 / 1 / 2: the cell was someone else's (add) or moved (cas).
LOST = 3
_STATE_OPS = ("get", "version", "set", "delete", "list", "add", "cas", "incr")
# Options each state operation takes, and whether they take a value.
_STATE_OPTIONS: dict[str, dict[str, bool]] = {
    "get": {"--entity": True, "--version": False, "--tainted": False},
    "version": {"--entity": True, "--tainted": False},
    "set": {"--entity": True, "--public": False},
    "delete": {"--entity": True},
    "list": {"--entity": True, "--tainted": False},
    "add": {"--entity": True},
    "cas": {"--entity": True, "--expect": True, "--as": True, "--op": True},
    "incr": {"--entity": True, "--by": True, "--as": True, "--op": True},
}
_STATE_ARITY = {"get": (1, 1), "version": (1, 1), "set": (2, 2), "delete": (1, 1),
                "list": (0, 0), "add": (1, 2), "cas": (2, 2), "incr": (1, 1)}


def state_goes_to_server(argv: list[str]) -> bool:
    """`state` asked outside a run, or about a named run, is answered by the server over
    HTTP (the click CLI); inside a run the socket answers and click is never imported.
    So is `emit` outside a run: it publishes on the project bus (cryopg/cli/bus.py)."""
    if argv and argv[0] == "emit":
        return not os.environ.get("CRYO_SOCKET") and not inside_run()
    if not argv or argv[0] != "state":
        return False
    if any(a == "--run" or a.startswith("--run=") for a in argv[1:]):
        return True
    # A step body has no socket: answered here, it fails as every nested call does.
    return not os.environ.get("CRYO_SOCKET") and not inside_run()


def _asks_help(args: list[str]) -> bool:
    """-h or --help among the options (not after `--`, nor as an option's value)."""
    for arg in args:
        if arg == "--":
            return False
        if arg in ("-h", "--help"):
            return True
    return False


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
        from cryopg.cli.verb_help import HELP

        try:
            print(usage[verb] + (f"\n{HELP[verb]}" if verb in HELP else ""), flush=True)
        except BrokenPipeError:  # `cryopg step -h | head -3`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if verb == "state" and args[:1] and args[0] in STATE_HELP and _asks_help(args[1:]):
        print(STATE_HELP[args[0]], end="")
        return 0
    try:
        if verb in WAIT_VERBS:
            return inscript_waits.main(verb, args)
        if verb == "state":
            return _state(args)
        if verb == "step":
            name, label, needs, command = _parse_step(args)
            socket_path = agent_socket(verb)
            return run_step(socket_path, name, label, needs, command)
        if verb == "sleep":
            if len(args) != 1:
                raise UsageError(USAGE["sleep"])
            try:
                seconds = parse_duration(args[0])
            except ValueError as e:
                raise UsageError(str(e)) from None
            call(agent_socket(verb), {"op": "sleep", "seconds": seconds})
            return 0
        if len(args) != 1:
            raise UsageError(USAGE["annotate"])
        call(agent_socket(verb), {"op": "annotate", "text": args[0]})
        return 0
    except UsageError as e:
        print(f"cryopg {verb}: {e}", file=sys.stderr)
        return 2
    except AgentError as e:
        print(f"cryopg {verb}: {e}", file=sys.stderr)
        return e.exit_code


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
    for opt in ("--public", "--tainted"):  # trust opt-ins: docs/security/trust.md
        if options.get(opt):
            request[opt[2:]] = True
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
    reply = call(agent_socket("state"), request)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
