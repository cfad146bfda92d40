"""What a newcomer met on a fresh clone (issue 42): `runs show` says what started a run
and whether it is untrusted, refusals exit 2, and `cryopg runs` folds child runs under
their parent."""

from __future__ import annotations

import pytest

from tests.server.conftest import Server
from tests.server.test_graphs import graph, submit_graph
from tests.server.test_pipelines import until_claim
from tests.server.test_triggers import put_workflow


def _fields(shown: str) -> dict[str, str]:
    """`runs show`'s `key: value` lines (the history below them is indented)."""
    return {k: v.strip() for k, _, v in (ln.partition(":") for ln in shown.splitlines()
                                         if ln and not ln.startswith(" ") and ":" in ln)}


async def test_runs_show_prints_the_trigger_and_untrusted(srv: Server) -> None:
    await put_workflow(srv, "relay")
    done = await srv.cli("handler", "create", "relay", "--event", "ping", "--workflow", "relay")
    assert done.returncode == 0, done.stderr
    (await srv.user("POST", "/events/ping", {"payload": {"hop": 0}})).ok(201)
    grant = await srv.claim()
    assert grant is not None
    shown = await srv.cli("runs", "show", grant["run_id"])
    assert shown.returncode == 0, shown.stderr
    fields = _fields(shown.stdout)
    assert fields["trigger"] == "event"
    assert fields["triggered_by"] == "event relay"
    assert "untrusted" not in fields

    manual = await srv.submit(untrusted=True)
    fields = _fields((await srv.cli("runs", "show", manual)).stdout)
    assert fields["trigger"] == "manual" and "triggered_by" not in fields
    assert fields["untrusted"].startswith("yes")
    assert (await srv.show(manual))["untrusted"] is True


async def test_refusals_exit_2(srv: Server) -> None:
    """The README: a refused request exits 2; an unreachable server is 1."""
    await put_workflow(srv, "nightly")
    done = await srv.cli("schedule", "create", "poll", "--workflow", "nightly", "--every", "1h")
    assert done.returncode == 0, done.stderr
    refusals = {
        "unknown workflow": ("schedule", "create", "n", "--workflow", "nosuch", "--every", "1h"),
        "still triggered": ("workflow", "delete", "nightly"),
        "unknown run": ("runs", "show", "run-ffffffffffffffff"),
        "unknown schedule": ("schedule", "delete", "nosuch"),
    }
    for what, argv in refusals.items():
        done = await srv.cli(*argv)
        assert done.returncode == 2, (what, done)
        assert len(done.stderr.strip().splitlines()) == 1, (what, done.stderr)

    run_id = await submit_graph(srv, graph([{"id": "a", "type": "state",
                                             "config": {"op": "set", "key": "k", "value": 1}}]))
    done = await srv.cli("rerun", run_id, "--from", "nosuch")
    assert done.returncode == 2, done


@pytest.mark.parametrize("show_all", [False, True], ids=["folded", "all"])
async def test_runs_folds_child_jobs_under_their_parent(srv: Server, show_all: bool) -> None:
    run_id = await submit_graph(srv, graph([
        {"id": "build", "type": "shell", "config": {"run": "echo built"}}]))
    job = await until_claim(srv)  # the graph's node job, a child run
    assert job["run_id"] != run_id
    plain = await srv.run_to_end()
    listed = await srv.cli("runs", *(["--all"] if show_all else []))
    assert listed.returncode == 0, listed.stderr
    rows = [ln.split() for ln in listed.stdout.splitlines()]
    ids = [r[0] for r in rows[1:]]
    assert rows[0][-1] == ("PARENT" if show_all else "CHILDREN")
    if show_all:
        assert set(ids) == {run_id, job["run_id"], plain}
    else:
        assert ids == [plain, run_id]
        assert rows[2][-1] == "1" and rows[1][-1] == "-"


async def test_a_cancelled_run_says_cancelled_once(srv: Server) -> None:
    run_id = await srv.submit()
    (await srv.user("POST", f"/runs/{run_id}/cancel")).ok()
    done = await srv.cli("logs", run_id, "--follow")
    assert done.returncode == 130
    assert done.stderr == f"cryopg: run {run_id} cancelled\n"


async def test_token_list_says_live_or_expired(srv: Server) -> None:
    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    await srv.make_token("member", login="later", expires_at=now + dt.timedelta(days=2))
    await srv.make_token("member", login="lapsed", expires_at=now - dt.timedelta(minutes=30),
                         fake_now=now - dt.timedelta(hours=1))
    listed = await srv.cli("token", "list")
    assert listed.returncode == 0, listed.stderr
    state = {ln.split("\t")[3]: ln.split("\t")[4] for ln in listed.stdout.splitlines()}
    assert state["later"].startswith("live (expires ")
    assert state["lapsed"].startswith("expired ")
    assert state["dev"] == "live"  # the owner's token never expires
