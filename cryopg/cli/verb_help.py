"""What `cryopg VERB -h` prints for an in-script verb below its usage line: what it does,
its options and exit codes. Loaded only for -h, so a verb's call never pays for it.

No imports and no `from __future__`: inscript.py loads it from the fast path.
"""

_DURATION = "DURATION: 500ms, 30s, 5m, 1.5h, 1d (a bare number is seconds)"

HELP = {
    "step": (
        "Run COMMAND once and record its stdout and exit code; a replay prints the\n"
        "recorded stdout and exits with the recorded code without running it again.\n"
        "A name is recorded once per run: give each step of a loop its own NAME.\n"
        "  --label LABEL    a description shown in the run's history\n"
        "  --secret NAME    COMMAND needs project secret NAME in its environment (repeat\n"
        "                   for several); the run fails if it was withheld or is not set\n"
        "COMMAND starts as a shell starts it: a text file without a `#!` line is read by\n"
        "/bin/sh. It sees $CRYO_IDEMPOTENCY_KEY (stable across retries and replays) and\n"
        "none of the other CRYO_* handles: a durable call inside a step fails.\n"
        "Exit: COMMAND's code; 126 not executable; 127 not found or cannot run;\n"
        "128+N killed by signal N; 1 the agent refused; 2 usage."),
    "sleep": (
        "Park the run for DURATION: the script process ends and the agent is freed; the\n"
        "run replays from the top when it is due and the sleep returns there.\n"
        f"{_DURATION}."),
    "annotate": (
        "Add TEXT to the run's history (a note on the run page).\n"
        "Not recorded: every pass of the script adds it again."),
    "wait-signal": (
        "Park until signal NAME is sent to this run (`cryopg signal RUN NAME [PAYLOAD]`);\n"
        "print its payload. Signals of a name queue: each wait takes the next one.\n"
        f"  --timeout DURATION  give up then and exit 124 ({_DURATION})"),
    "wait-event": (
        "Park until an event NAME is published on the project bus after this wait\n"
        "began; print its payload.\n"
        f"  --timeout DURATION  give up then and exit 124 ({_DURATION})"),
    "emit": (
        "Publish event NAME on the project bus, once whatever the replays: handlers of\n"
        "NAME start runs, and runs waiting on NAME wake. PAYLOAD is JSON, else a string."),
    "spawn": (
        "Start FILE as a child run, once whatever the replays; print its run id.\n"
        "  --input JSON       the child's input\n"
        "  --interpreter I    run FILE with I instead of choosing by extension"),
    "activity-submit": (
        "Start COMMAND as a child job on any free agent (once); collect it with\n"
        "`activity-collect NAME`. A name is used once per run.\n"
        "  --retries N              run it again up to N times when it fails\n"
        f"  --retry-backoff DURATION wait this long between attempts ({_DURATION})\n"
        "  --retry-on-exit CODES    retry only on these exit codes (e.g. 1,75)"),
    "activity-collect": (
        "Park until activity NAME ends; print its output and exit with its code (130\n"
        "when it was cancelled)."),
    "activity-wait-all": (
        "Park until every activity submitted and not collected has ended; print how\n"
        "many failed."),
    "activity": (
        "activity-submit and activity-collect in one: run COMMAND as a child job, park\n"
        "until it ends, print its output and exit with its code. Options as for\n"
        "activity-submit."),
    "output": (
        "Set run output KEY to VALUE (JSON, else a string), shown by `cryopg runs show`\n"
        "and the run's HTTP resource."),
    "lock": (
        "Hold the project's concurrency lease GROUP. Waiting for it parks the run (FIFO,\n"
        "no agent held); the same lease a pipeline job's `concurrency:` takes.\n"
        "  With `-- COMMAND`: COMMAND runs once holding it (recorded as step lock:GROUP)\n"
        "  and the lease passes on when it ends. COMMAND gets no agent socket, so a\n"
        "  durable call (`cryopg state ...`) inside it fails.\n"
        "  Without a command: held until the run ends. Keep the section in the script.\n"
        "A read-modify-write under a lock that counts once: examples/locked-counter."),
    "call-graph": (
        "Run stored graph NAME as a child graph run (once) and park until it ends; print\n"
        "its output as JSON; exit 1 with its error when it failed.\n"
        "  --input JSON   the child's input"),
    "call-node": (
        "Run one node of TYPE (a cryosleep-node/v1 document) as a child graph run (once)\n"
        "and park until it ends; print its output as JSON.\n"
        "  --config JSON  the node's config (required)\n"
        "  --input JSON   the child's input"),
}
