"""The conformance workflows (sdks/conformance/workflows/<lang>/) through a real dev stack,
checked against sdks/conformance/expected/<name>.json. A language is one directory with a
lang.json; dropping its workflow files in is all it takes to be tested here.

One test per language: its workflows run side by side on one stack (each expectation
names its own events, entities and locks), which keeps the suite fast as languages are
added; a failure lists every workflow that did not conform."""

from __future__ import annotations

import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.helpers import show, submit, wait_for
from tests.sdk.conftest import CONFORMANCE

WORKFLOWS = CONFORMANCE / "workflows"
EXPECTED = CONFORMANCE / "expected"
AGENTS = 8  # enough for every workflow's runs and children at once


def _languages() -> list[Any]:
    return [pytest.param(d.name, id=d.name)
            for d in sorted(WORKFLOWS.iterdir()) if (d / "lang.json").exists()]


def _skip_reason(lang_name: str, name: str, lang: dict[str, Any], spec: dict[str, Any]) -> str:
    from agent.socket_server import VERBS
    from cryopg.cli.inscript import IN_SCRIPT_VERBS

    if not (WORKFLOWS / lang_name / f"{name}{lang['ext']}").exists():
        return f"{name} is not written in {lang_name} yet"
    verbs = [v for v in spec.get("needs_verbs", []) if v not in VERBS]
    if verbs:
        return f"the agent does not offer {', '.join(verbs)} yet"
    if lang_name == "bash":
        cli = [v for v in spec.get("needs_cli_verbs", []) if v not in IN_SCRIPT_VERBS]
        if cli:
            return f"cryopg has no in-script verb {', '.join(cli)} yet"
    return ""


# What agent/toolchains.py says around a cold build of a .go or .rs workflow: in the log
# on a fresh cache only, so not part of what a workflow prints.
_BUILD_LINE = re.compile(r"^cryopg: (building|still building|built) ")


def _blocks(lines: list[str]) -> list[list[str]]:
    out: list[list[str]] = []
    for line in lines:
        if line == "pass" or not out:
            out.append([])
        out[-1].append(line)
    return out


def without_interrupted_replays(got: list[str], want: list[str]) -> list[str]:
    """`got` less any pass that was cut short while it only replayed: a block that is a
    prefix of the next one and prints nothing but lines the expected output prints on a
    replay (never a first-pass effect such as `computing`). A claim lost to a loaded
    machine may add such a pass; it repeats no recorded effect, which is what conformance
    is about. Anything else is left for the comparison to fail on."""
    replayed = {line for block in _blocks(want)[1:] for line in block}
    blocks = _blocks(got)
    kept = [b for i, b in enumerate(blocks)
            if not (i + 1 < len(blocks) and b == blocks[i + 1][:len(b)]
                    and set(b) <= replayed)]
    if len(kept) != len(blocks):
        print(f"conformance: excused {len(blocks) - len(kept)} interrupted replay pass(es)")
    return [line for b in kept for line in b]


def log_lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.replace("\r", "").splitlines()
            if line.strip() and not _BUILD_LINE.match(line)]


def _drive_all(stack: Any, dsn: str, runs: list[str], actions: list[dict[str, Any]]) -> None:
    for action in actions:
        _drive(stack, dsn, runs, action)


def _drive(stack: Any, dsn: str, runs: list[str], action: dict[str, Any]) -> None:
    if "wait_substate" in action:
        for run_id in runs:
            wait_for(f"{run_id} {action['wait_substate']}",
                     lambda r=run_id: show(stack, r)["substate"] == action["wait_substate"],
                     timeout=60)
    elif "emit" in action:
        event = action["emit"]
        with psycopg.connect(dsn, autocommit=True) as app:  # as an application would
            app.execute("SELECT cryo.publish_event(%s, %s, %s, %s::jsonb)",
                        (stack.org, stack.project, event["name"],
                         json.dumps(event.get("payload"))))
    elif "signal" in action:
        sig = action["signal"]
        for run_id in runs:
            sent = stack.cli("signal", run_id, sig["name"], json.dumps(sig.get("payload")))
            assert sent.returncode == 0, sent.stderr
    else:
        raise AssertionError(f"unknown drive action {action}")


# What is checked is each workflow's passes: a claim lapsing under a loaded machine (cold
# Go and Rust builds of every workflow at once take all the CPU there is) would add a
# pass the workflow did not ask for, so claims here are as long as a deployment's.
def _prebuild(lang_dir: Path) -> None:
    """Build a compiled language's workflows first, the way the agent will (its builds
    are keyed by content, so the runs find them built): what the drive steps time is the
    workflows, not a cold compiler's minutes on a loaded machine."""
    from agent import toolchains

    build = {".go": toolchains.go, ".rs": toolchains.rust}
    files = [f for f in sorted(lang_dir.iterdir()) if f.suffix in build]
    with ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda f: (f, build[f.suffix](f)), files))
    failed = [f.name for f, got in built if isinstance(got, int)]
    assert not failed, f"cannot build {failed}"


@pytest.mark.agents(AGENTS)
@pytest.mark.claim_seconds(30)
@pytest.mark.parametrize("lang_name", _languages())
def test_conformance(stack: Any, dsn: str, lang_name: str) -> None:
    lang_dir = WORKFLOWS / lang_name
    lang = json.loads((lang_dir / "lang.json").read_text())
    missing = [p for p in lang.get("requires", []) if shutil.which(p) is None]
    if missing:
        pytest.skip(f"{lang_name} needs {', '.join(missing)} on PATH")
    given = json.dumps({"dir": str(lang_dir), "child_argv": lang.get("child_argv", [])})

    specs: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for path in sorted(EXPECTED.glob("*.json")):
        spec = json.loads(path.read_text())
        reason = _skip_reason(lang_name, path.stem, lang, spec)
        if reason:
            skipped[path.stem] = reason
        else:
            specs[path.stem] = spec
    if not specs:
        pytest.skip("; ".join(skipped.values()))

    _prebuild(lang_dir)
    for spec in specs.values():  # graphs a workflow calls, stored before it runs
        for graph_name, doc in spec.get("graphs", {}).items():
            doc_path = stack.dir / f"{graph_name}.graph.json"
            doc_path.write_text(json.dumps(doc))
            stored = stack.cli("workflow", "put", graph_name, str(doc_path))
            assert stored.returncode == 0, stored.stderr

    # The CLI costs a Python start per call: submit, drive and follow side by side.
    with ThreadPoolExecutor(16) as pool:
        submitted = {name: [pool.submit(submit, stack, lang_dir / f"{name}{lang['ext']}",
                                        "--input", given)
                            for _ in range(int(spec.get("copies", 1)))]
                     for name, spec in specs.items()}
        runs = {name: [f.result() for f in futures] for name, futures in submitted.items()}
        driven = [pool.submit(_drive_all, stack, dsn, runs[name], spec.get("drive", []))
                  for name, spec in specs.items()]
        followed = {run_id: pool.submit(stack.cli, "logs", run_id, "--follow", timeout=90)
                    for ids in runs.values() for run_id in ids}
        for f in driven:
            f.result()

    failures: list[str] = []
    for name, spec in specs.items():
        want = spec.get("lines_by_lang", {}).get(lang_name, spec["lines"])
        for run_id in runs[name]:
            done = followed[run_id].result()
            got = log_lines(done.stdout)
            if got != want and "pass" in want:
                got = without_interrupted_replays(got, want)
            if done.returncode != spec.get("exit_code", 0) or got != want:
                failures.append(f"{name} ({run_id}) exited {done.returncode}:\n  got  {got}\n"
                                f"  want {want}\n{done.stderr}")
        for cell in spec.get("entity_state", []):
            read = stack.cli("state", "get", cell["key"], "--entity", cell["entity"])
            value = json.loads(read.stdout) if read.returncode == 0 and read.stdout else None
            if value != cell["value"]:
                failures.append(f"{name}: entity {cell['entity']} {cell['key']} is {value!r}, "
                                f"want {cell['value']!r} {read.stderr}")
    assert not failures, "\n".join(failures)
    if skipped:  # conformed, but say what was not checked
        print(f"{lang_name}: not checked: {skipped}")
