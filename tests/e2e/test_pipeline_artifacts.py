"""Artifacts as pipeline keys on a real `cryopg dev`: a job's `artifacts:` is uploaded
after its steps succeed and named in the graph run's scope; a job that `needs:` it finds
the files in its working directory (unless the need says artifacts: false); a declared
file the job did not write fails the job with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.helpers import show


def nodes(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in run["graph"]["nodes"]}


def latest_run(stack: Any) -> str:
    listed = json.loads(stack.cli("runs", "--json").stdout)
    return next(r["id"] for r in listed if not r.get("parent_run_id"))


def test_a_job_uploads_and_the_job_that_needs_it_downloads(stack: Any) -> None:
    d: Path = stack.dir
    (d / "ci.yaml").write_text("""\
version: cryosleep/pipeline/v1
jobs:
  build:
    steps:
      - run: mkdir -p dist && echo "built $$" > dist/app.txt
      - run: echo "log line" > build.log
      - run: exit 0   # an exit in the steps still reaches the uploads
    artifacts: [dist/app.txt, {name: log, path: build.log}]
  wipe:   # a local dev agent runs every job in the submit directory: start clean
    needs: [{job: build, artifacts: false}]
    steps: [rm -rf dist build.log]
  ordering:
    needs: [wipe, {job: build, artifacts: false}]
    steps:
      - run: test ! -e dist/app.txt && echo "no files"
  test:
    needs: [build, ordering]
    steps:
      - run: cat dist/app.txt build.log
      - run: rm -rf dist build.log
  check:
    needs: [test, build]
    script:
      filename: check.py
      source: "print('py', open('dist/app.txt').read().split()[0])"
""")
    done = stack.cli("submit", "ci.yaml", "--follow", timeout=120)
    run_id = latest_run(stack)
    run = show(stack, run_id)
    got = nodes(run)
    assert done.returncode == 0 and run["status"] == "succeeded", (done.stderr, got)
    built = got["test"]["output"]["text"].splitlines()
    assert built[0].startswith("built ") and built[1] == "log line", got["test"]
    assert got["check"]["status"] == "succeeded", got["check"]
    assert got["ordering"]["output"]["text"] == "no files"
    # The graph run holds them (collected with it), under the job's name.
    listed = stack.cli("artifact", "list", run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(a["name"] for a in json.loads(listed.stdout)) == ["build/dist/app.txt",
                                                                    "build/log"]
    out = d / "app.txt"
    fetched = stack.cli("artifact", "get", "build/dist/app.txt", str(out), "--run", run_id)
    assert fetched.returncode == 0 and out.read_text() == built[0] + "\n", fetched.stderr


def test_a_declared_file_the_job_did_not_write_fails_it(stack: Any) -> None:
    d: Path = stack.dir
    (d / "miss.yaml").write_text("""\
version: cryosleep/pipeline/v1
jobs:
  build:
    steps: [echo building]
    artifacts: [dist/app.txt]
  after: {needs: build, steps: [cat dist/app.txt]}
""")
    done = stack.cli("submit", "miss.yaml", "--follow", timeout=120)
    assert done.returncode != 0
    run = show(stack, latest_run(stack))
    got = nodes(run)
    assert run["status"] == "failed" and got["build"]["status"] == "failed"
    text = got["build"]["output"]["text"].splitlines()
    assert text[-1] == "artifacts: dist/app.txt was not written by the job (no such file)", text
    assert got["after"]["status"] in ("pending", "skipped")
