"""Every code block of README.md, docs/ and every other README runs as written
(tests/e2e/docblocks.py says how, and how a block that cannot run is marked)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.e2e.docblocks import (
    KINDS,
    ROOT,
    SHELL,
    Block,
    blocks,
    example_dir,
    pages,
    transcript,
)

# The documents' SQL examples act on dev/default: the stack must be the test's own.
pytestmark = pytest.mark.private_stack

STEP = "@@cryopg-doc-step@@"


def _runnable_pages() -> list[Any]:
    return [pytest.param(p, id=str(p.relative_to(ROOT))) for p in pages()
            if any(b.not_run is None for b in blocks(p))]


def test_every_block_is_run_or_marked() -> None:
    unknown = [f"{b.where} ({b.lang or 'no language'})" for p in pages() for b in blocks(p)
               if b.not_run is None and b.lang not in KINDS]
    assert not unknown, ("blocks of a kind the docs test cannot run; mark each with "
                         f"<!-- not run: REASON --> on the line before: {unknown}")
    vague = [f"{b.where} ({b.not_run!r})" for p in pages() for b in blocks(p)
             if b.not_run is not None and len(b.not_run.split()) < 3]
    assert not vague, f"a <!-- not run: REASON --> says why in a few words: {vague}"


def test_every_readme_and_example_is_a_page() -> None:
    """Not only README.md and docs/: the SDKs', sql/'s and each example's README too."""
    listed = {str(p.relative_to(ROOT)) for p in pages()}
    assert {"sql/README.md", "sdks/go/README.md", "examples/preview-env/README.md",
            "examples/per-record-lease/README.md", "examples/locked-counter/README.md"} <= listed
    assert not any("node_modules" in p or p.startswith(".venv") for p in listed)


def test_a_failing_block_fails(stack: Any, tmp_path: Path) -> None:
    """The runner can fail: a shell command that exits non-zero, a transcript whose output
    differs, a broken document."""
    bad = [Block("x.md", 1, "", "cryopg runs show run-nosuch\n"),
           Block("x.md", 2, "", "$ echo hello\nbye\n"),
           Block("x.md", 3, "json", '{"version": "cryosleep-graph/v1", "nodes": 1}\n')]
    for block in bad:
        with pytest.raises(AssertionError):
            _run(block, stack, tmp_path)


@pytest.mark.agents(2)
@pytest.mark.dev_env(CRYOPG_EGRESS_ALLOW="127.0.0.1")  # docs/graphs.md's connector recipe
@pytest.mark.parametrize("page", _runnable_pages())
def test_page_blocks_run(page: Path, stack: Any) -> None:
    work = stack.dir / "doc"  # below the stack's directory: the CLI finds its dev stack
    example = example_dir(page)
    if example is not None:  # its files beside it, as in the checkout
        shutil.copytree(example, work)
    else:
        work.mkdir()
    for block in blocks(page):
        if block.not_run is None:
            _run(block, stack, work)


def _run(block: Block, stack: Any, work: Path) -> None:
    if block.file:
        (work / block.file).write_text(block.text)
    if block.lang in ("json", "yaml"):
        _check_document(block)
    elif block.lang == "sql":
        with psycopg.connect(stack.info["database_url"]) as conn:
            conn.execute(block.text)  # type: ignore[call-overload]
    elif block.is_transcript:
        _run_transcript(block, stack, work)
    elif block.lang in SHELL or block.lang == "python":
        argv = ["bash", "-eu"] if block.lang in SHELL else [sys.executable, "-"]
        env = {**stack.env, "PYTHONPATH": str(ROOT / "sdks" / "python")}
        done = subprocess.run(argv, input=block.text, cwd=work, env=env, capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, (f"{block.where} exited {done.returncode}:\n"
                                      f"{done.stdout}\n{done.stderr}")
    else:
        raise AssertionError(f"{block.where}: cannot run a {block.lang!r} block; mark it")


def _check_document(block: Block) -> None:
    from cryopg.graphs.document import compile_graph, is_graph, load
    from cryopg.pipelines import compile_pipeline, is_pipeline

    try:
        doc = json.loads(block.text) if block.lang == "json" else yaml.safe_load(block.text)
        if block.lang == "json" and is_graph(block.text):
            compile_graph(load(block.text))
        elif block.lang == "yaml" and is_pipeline(block.text, block.file or "doc.yaml"):
            compile_pipeline(block.text)
    except Exception as exc:  # any refusal of the document is the block's failure
        raise AssertionError(f"{block.where}: {type(exc).__name__}: {exc}") from None
    assert doc is not None, f"{block.where} is empty"


def _run_transcript(block: Block, stack: Any, work: Path) -> None:
    """The commands run in one shell (so `echo $?` sees the one before); each must print
    the lines the page shows under it."""
    steps = transcript(block)
    script = "".join(f"{cmd}\n__rc=$?; echo {STEP}; (exit $__rc)\n" for cmd, _ in steps)
    done = subprocess.run(["bash", "-c", script], cwd=work, env=stack.env, capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)
    # stderr and stdout are kept apart by the pipes; the step marker is on stdout, so an
    # error line is matched against the whole of stderr.
    printed = done.stdout.split(STEP + "\n")
    for i, (cmd, want) in enumerate(steps):
        got = (printed[i] if i < len(printed) else "") + done.stderr
        missing = [w for w in want if w not in got]
        assert not missing, f"{block.where}: `{cmd}` did not print {missing}; got:\n{got}"
