"""The one list of in-script verbs: the commands a script calls inside a run, each one
request to its agent's socket. Everything that dispatches or describes them reads this
list -- the entry point (entry.py, before click loads), inscript.py and inscript_waits.py,
`cryopg --help` -- and a test holds the compiled client (cryopg/cli/fast/main.go) to
COMPILED_VERBS. A new verb: add it here, its usage line where it is served, its socket
op in agent/socket_server.py, and a test in tests/agent/test_inscript*.py.

No imports and no `from __future__`: every in-script call loads this module.
"""

# Served by inscript.py itself.
CORE_VERBS = ("step", "sleep", "annotate", "state")
# Served by inscript_waits.py, imported only when one of these is called.
WAIT_VERBS = ("wait-signal", "wait-event", "emit", "spawn", "activity-submit",
              "activity-collect", "activity-wait-all", "activity", "output", "lock",
              "call-graph", "call-node")
IN_SCRIPT_VERBS = frozenset(CORE_VERBS + WAIT_VERBS)
# What the compiled client answers without starting Python; it hands every other
# command, and any call it would refuse, to the Python cryopg.
COMPILED_VERBS = ("step",)


def help_epilog() -> str:
    """The in-script verbs as `cryopg --help` lists them (click never sees them)."""
    lines, line = [], " "
    for verb in CORE_VERBS + WAIT_VERBS:
        if len(line) + len(verb) + 2 > 80:
            lines.append(line)
            line = " "
        line += f" {verb},"
    lines.append(line.rstrip(","))
    return "\b\nInside a run (each takes -h):\n" + "\n".join(lines) + "\n"
