"""Schedules, webhooks, event handlers and cancel_on through the in-process server, on
the real test database. Time moves with cryo.fake_now on the connection a scheduler
round is given; nothing waits for a cron minute."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import psycopg
import pytest
from aiohttp import web

from cryopg.server import triggers
from cryopg.triggers.webhook import sign
from tests.server.conftest import AGENT_CAPS, Server

SCRIPT = "echo hi\n"


def graph(**top: Any) -> str:
    return json.dumps({"version": "cryosleep-graph/v1",
                       "nodes": [{"id": "a", "type": "wait", "config": {"signal": "go"}}],
                       **top})


async def put_workflow(srv: Server, name: str, source: str = SCRIPT,
                       filename: str = "wf.sh") -> None:
    (await srv.user("PUT", f"/workflows/{name}", {"source": source, "filename": filename})).ok()


async def runs_of(srv: Server, workflow: str) -> list[dict[str, Any]]:
    got = (await srv.user("GET", f"/runs?workflow={workflow}&limit=200")).ok()
    return got["runs"]  # type: ignore[no-any-return]


async def fire(srv: Server, later: float = 0.0) -> list[str]:
    """One scheduler round on a connection `later` seconds ahead (cryo.fake_now)."""
    async with await srv.connect() as conn:
        if later:
            await conn.execute("SELECT set_config('cryo.fake_now', "
                               "(now() + make_interval(secs => %s))::text, false)", (later,))
        return await triggers.fire_due_schedules(srv.app, conn)


async def schedule(srv: Server, name: str) -> dict[str, Any]:
    rows = (await srv.user("GET", "/schedules")).ok()["schedules"]
    return next(s for s in rows if s["name"] == name)  # type: ignore[no-any-return]


# -- schedules ------------------------------------------------------------------------------

@pytest.mark.parametrize("body, said", [
    ({"cron": "61 * * * *"}, "bad cron expression '61 * * * *'"),
    ({"cron": "* * * *"}, "bad cron expression"),
    ({"cron": "0 9 * * *", "timezone": "Mars/Base"}, "unknown time zone 'Mars/Base'"),
    ({"every": "0.5s"}, "at least 1 second"),
    ({"cron": "* * * * * *"}, "fires 1 s apart; a schedule fires at most once every 60 s"),
    ({"cron": "*/20 * * * * *"}, "fires 20 s apart"),
    ({"every": "soon"}, "is not a duration"),
    ({}, "give either cron or every"),
    ({"cron": "* * * * *", "every": "1m"}, "give either cron or every"),
])
async def test_a_bad_schedule_is_a_one_line_400(srv: Server, body: dict[str, Any],
                                                said: str) -> None:
    await put_workflow(srv, "nightly")
    msg = (await srv.user("POST", "/schedules", {"name": "n", "workflow": "nightly",
                                                 **body})).refused(400, "invalid_argument")
    assert said in msg and "\n" not in msg
    assert (await srv.user("GET", "/schedules")).ok()["schedules"] == []


async def test_bad_cron_from_the_cli_is_one_line(srv: Server) -> None:
    await put_workflow(srv, "nightly")
    done = await srv.cli("schedule", "create", "n", "--workflow", "nightly", "--cron", "99 * * * *")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "bad cron expression" in done.stderr
    done = await srv.cli("schedule", "create", "n", "--workflow", "nightly", "--cron",
                         "0 9 * * *", "--timezone", "Nowhere/Town")
    assert done.returncode != 0 and "unknown time zone" in done.stderr
    assert done.stderr.strip().count("\n") == 0
    done = await srv.cli("schedule", "create", "n", "--workflow", "nope", "--every", "1h")
    assert done.returncode != 0 and "no workflow nope" in done.stderr


async def test_each_due_tick_starts_one_run_and_downtime_one_catch_up(srv: Server) -> None:
    await put_workflow(srv, "nightly")
    made = (await srv.user("POST", "/schedules", {
        "name": "every-min", "workflow": "nightly", "every": "1m",
        "input": {"region": "eu"}})).ok(201)
    first = dt.datetime.fromisoformat(made["next_fire_at"])
    assert made["last_fire_at"] is None
    assert await fire(srv) == []  # not due yet
    started = await fire(srv, later=61)
    assert len(started) == 1
    assert await fire(srv, later=61) == []  # the same tick never fires twice
    run = await srv.show(started[0])
    assert run["input"]["region"] == "eu"
    assert run["input"]["trigger"]["kind"] == "schedule"
    assert run["input"]["trigger"]["name"] == "every-min"
    assert dt.datetime.fromisoformat(run["input"]["trigger"]["scheduled_at"]) == first
    assert run["input"]["trigger"]["catch_up"] is False
    assert run["trigger"] == "schedule"
    assert run["triggered_by"] == {"kind": "schedule", "name": "every-min", "depth": None}
    assert any(h["kind"] == "triggered" and h["name"] == "every-min" for h in run["history"])
    s = await schedule(srv, "every-min")
    assert s["last_run_id"] == started[0]
    assert dt.datetime.fromisoformat(s["last_fire_at"]) == first
    assert dt.datetime.fromisoformat(s["next_fire_at"]) == first + dt.timedelta(minutes=1)
    # Ten hours of downtime: 600 missed ticks, one catch-up run, then back on phase.
    caught = await fire(srv, later=10 * 3600)
    assert len(caught) == 1
    trig = (await srv.show(caught[0]))["input"]["trigger"]
    assert trig["catch_up"] is True
    assert dt.datetime.fromisoformat(trig["scheduled_at"]) == first + dt.timedelta(minutes=1)
    assert await fire(srv, later=10 * 3600) == []
    s = await schedule(srv, "every-min")
    nxt = dt.datetime.fromisoformat(s["next_fire_at"])
    assert (nxt - first).total_seconds() % 60 == 0
    assert nxt > dt.datetime.now(dt.UTC) + dt.timedelta(hours=10) - dt.timedelta(minutes=1)
    assert len(await runs_of(srv, "nightly")) == 2
    listed = await srv.cli("schedule", "list")
    assert "every-min\tnightly\tevery 60s\tactive" in listed.stdout, listed


async def test_a_claimed_tick_is_invisible_to_a_second_scheduler(srv: Server) -> None:
    await put_workflow(srv, "nightly")
    (await srv.user("POST", "/schedules", {"name": "s", "workflow": "nightly",
                                           "every": "1m"})).ok(201)
    async with await srv.connect() as a, await srv.connect() as b:
        for c in (a, b):
            await c.execute("SELECT set_config('cryo.fake_now', "
                            "(now() + interval '61 seconds')::text, false)")
        async with a.transaction():
            held = await (await a.execute("SELECT name FROM cryo.claim_schedules()")).fetchall()
            assert held == [("s",)]
            # The other server's round, meanwhile: nothing to take, nothing started.
            assert await triggers.fire_due_schedules(srv.app, b) == []
        # a rolled back (a server that died mid-round): the tick is still due, not lost.
        assert len(await triggers.fire_due_schedules(srv.app, b)) == 1
        assert await triggers.fire_due_schedules(srv.app, a) == []
    assert len(await runs_of(srv, "nightly")) == 1


async def test_pause_resume_delete(srv: Server) -> None:
    await put_workflow(srv, "nightly")
    (await srv.user("POST", "/schedules", {"name": "s", "workflow": "nightly",
                                           "cron": "*/5 * * * *",
                                           "timezone": "Europe/Paris"})).ok(201)
    assert (await srv.cli("schedule", "pause", "s")).returncode == 0
    assert (await schedule(srv, "s"))["paused"] is True
    assert await fire(srv, later=3 * 3600) == []  # paused: nothing fires
    resumed = await srv.cli("schedule", "resume", "s")
    assert resumed.returncode == 0 and "next fire" in resumed.stdout
    s = await schedule(srv, "s")
    assert s["paused"] is False and s["next_fire_at"] is not None
    nxt = dt.datetime.fromisoformat(s["next_fire_at"])
    assert nxt.minute % 5 == 0 and nxt.second == 0
    assert nxt - dt.datetime.now(dt.UTC) <= dt.timedelta(minutes=5)
    # No catch-up for the paused ticks: one second past the next fire, exactly one run
    # (a fixed 301 s also reached the fire after it when resumed just before a boundary).
    past_next = max((nxt - dt.datetime.now(dt.UTC)).total_seconds() + 1, 1.0)
    assert len(await fire(srv, later=past_next)) == 1
    assert (await srv.cli("schedule", "delete", "s")).returncode == 0
    assert (await srv.user("GET", "/schedules")).ok()["schedules"] == []
    assert await fire(srv, later=3600) == []
    gone = await srv.cli("schedule", "delete", "s")
    assert gone.returncode != 0 and "no schedule s" in gone.stderr
    (await srv.user("POST", "/schedules/s/pause")).refused(404, "not_found")


async def test_on_schedule_and_on_event_register_and_follow_the_workflow(srv: Server) -> None:
    doc = graph(on={"schedule": ["*/5 * * * *", "0 9 * * 1"], "event": ["order.created"]})
    await put_workflow(srv, "orders", doc, "orders.json")
    names = {s["name"]: s for s in (await srv.user("GET", "/schedules")).ok()["schedules"]}
    assert set(names) == {"orders:1", "orders:2"}
    assert names["orders:1"]["registered_by"] == "orders"
    handlers = (await srv.user("GET", "/handlers")).ok()["handlers"]
    assert [(h["name"], h["event"], h["workflow"]) for h in handlers] == [
        ("orders:order.created", "order.created", "orders")]
    # The scheduler plans ticks for schedules registered without one.
    await fire(srv)
    assert (await schedule(srv, "orders:1"))["next_fire_at"] is not None
    kept = (await schedule(srv, "orders:1"))["next_fire_at"]
    # Re-putting replaces: a cron kept keeps its next fire; one gone goes.
    await put_workflow(srv, "orders", graph(on={"schedule": "*/5 * * * *"}), "orders.json")
    rows = (await srv.user("GET", "/schedules")).ok()["schedules"]
    assert [(s["name"], s["next_fire_at"]) for s in rows] == [("orders:1", kept)]
    assert (await srv.user("GET", "/handlers")).ok()["handlers"] == []
    # Removing the key removes them.
    await put_workflow(srv, "orders", graph(), "orders.json")
    assert (await srv.user("GET", "/schedules")).ok()["schedules"] == []
    bad = await srv.user("PUT", "/workflows/orders", {"source": graph(on={"schedule": "nope"}),
                                                      "filename": "orders.json"})
    assert "on.schedule: bad cron expression" in bad.refused(400, "invalid_argument")


# -- webhooks -------------------------------------------------------------------------------

async def hook(srv: Server, name: str, **fields: Any) -> dict[str, Any]:
    return (await srv.user("POST", "/webhooks", {"name": name, **fields})).ok(201)  # type: ignore[no-any-return]


async def deliver(srv: Server, path: str, payload: Any, *, secret: str | None,
                  event: str = "push", header: str = "X-Hub-Signature-256",
                  raw: bytes | None = None) -> tuple[int, Any]:
    body = raw if raw is not None else json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "Content-Type": "application/json"}
    if secret is not None:
        headers[header] = sign(secret, body)
    async with srv.client.post(path, data=body, headers=headers) as resp:
        return resp.status, await resp.json()


PUSH = {"ref": "refs/heads/main", "after": "abc123", "repository": {"full_name": "o/r"}}


async def test_webhook_signature_good_bad_missing_and_redelivery(srv: Server) -> None:
    await put_workflow(srv, "ci")
    made = await hook(srv, "gh", workflow="ci")
    assert made["path"] == "/api/v1/hooks/dev/default/gh" and made["secret"].startswith("whsec_")
    assert "secret" not in json.dumps((await srv.user("GET", "/webhooks")).ok())
    status, body = await deliver(srv, made["path"], PUSH, secret=None)
    assert status == 401 and body["error"]["code"] == "unauthorized"
    status, body = await deliver(srv, made["path"], PUSH, secret="whsec_wrong")
    assert status == 401 and "signature" in body["error"]["message"]
    listed = (await srv.user("GET", "/webhooks")).ok()["webhooks"]
    assert listed[0]["deliveries"] == 0 and await runs_of(srv, "ci") == []  # nothing stored
    status, first = await deliver(srv, made["path"], PUSH, secret=made["secret"])
    assert status == 201 and first["outcome"] == "started" and first["untrusted"] is False
    run = await srv.show(first["run_id"])
    assert run["input"]["trigger"] == {"kind": "webhook", "webhook": "gh", "event": "push",
                                       "ref": "refs/heads/main", "sha": "abc123",
                                       "payload": PUSH}
    assert run["triggered_by"]["kind"] == "webhook" and run["triggered_by"]["name"] == "gh"
    # A redelivery (GitHub's "redeliver", or a retry) creates nothing.
    status, again = await deliver(srv, made["path"], PUSH, secret=made["secret"])
    assert status == 200 and again["duplicate"] is True and again["run_id"] == first["run_id"]
    # The generic header works the same.
    status, other = await deliver(srv, made["path"], {**PUSH, "after": "def"},
                                  secret=made["secret"], header="X-Cryo-Signature")
    assert status == 201 and other["run_id"] != first["run_id"]
    assert len(await runs_of(srv, "ci")) == 2
    status, body = await deliver(srv, "/api/v1/hooks/dev/default/nope", PUSH, secret="x")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = await deliver(srv, made["path"], None, secret=made["secret"], raw=b"{nope")
    assert status == 400 and "JSON" in body["error"]["message"]
    # Only admins make webhooks; deleting one closes its URL.
    (await srv.user("POST", "/webhooks", {"name": "m"}, role="member")).refused(403, "forbidden")
    assert (await srv.cli("webhook", "delete", "gh")).returncode == 0
    status, _ = await deliver(srv, made["path"], {"x": 1}, secret=made["secret"])
    assert status == 404


async def test_webhook_create_from_the_cli_prints_url_and_secret_once(srv: Server) -> None:
    await put_workflow(srv, "ci")
    done = await srv.cli("webhook", "create", "gh", "--workflow", "ci")
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines["url"] == f"{srv.url}/api/v1/hooks/dev/default/gh"
    secret = lines["secret"]
    status, got = await deliver(srv, "/api/v1/hooks/dev/default/gh", PUSH, secret=secret)
    assert status == 201, got
    listed = await srv.cli("webhook", "list")
    assert secret not in listed.stdout and "gh\tci\t1\t" in listed.stdout


async def test_if_false_answers_202_without_a_run_and_on_webhook_filters(srv: Server) -> None:
    doc = graph(**{"if": "trigger.ref == 'refs/heads/main'"}, on={"webhook": ["push"]})
    await put_workflow(srv, "deploy", doc, "deploy.json")
    made = await hook(srv, "gh", workflow="deploy")
    status, got = await deliver(srv, made["path"], {**PUSH, "ref": "refs/heads/dev"},
                                secret=made["secret"])
    assert (status, got["outcome"], got["run_id"]) == (202, "skipped", None)
    status, got = await deliver(srv, made["path"], {"ref": "refs/heads/main", "issue": 1},
                                secret=made["secret"], event="issues")
    assert (status, got["outcome"], got["run_id"]) == (202, "ignored", None)
    assert await runs_of(srv, "deploy") == []
    status, got = await deliver(srv, made["path"], PUSH, secret=made["secret"])
    assert (status, got["outcome"]) == (201, "started")
    assert (await srv.show(got["run_id"]))["kind"] == "graph"


FORK_PR = {"action": "opened", "number": 7, "pull_request": {
    "head": {"ref": "feature", "sha": "f00d", "repo": {"full_name": "mallory/r"}},
    "base": {"ref": "main", "sha": "b00c", "repo": {"full_name": "o/r"}}}}


async def test_a_fork_pull_request_starts_an_untrusted_run(srv: Server) -> None:
    await put_workflow(srv, "ci")
    (await srv.user("PUT", "/secrets/DEPLOY_KEY", {"value": "hunter2"})).ok(201)
    made = await hook(srv, "gh", workflow="ci")
    status, got = await deliver(srv, made["path"], FORK_PR, secret=made["secret"],
                                event="pull_request")
    assert status == 201 and got["untrusted"] is True
    grant = await srv.claim_run(got["run_id"], caps=[*AGENT_CAPS, "isolated"])
    assert grant["secrets"] == {} and grant["withheld"] == ["DEPLOY_KEY"]
    assert grant["input"]["trigger"]["ref"] == "feature"
    assert grant["input"]["trigger"]["sha"] == "f00d"
    await srv.finish(grant)
    same_repo = json.loads(json.dumps(FORK_PR))
    same_repo["pull_request"]["head"]["repo"]["full_name"] = "o/r"
    status, got = await deliver(srv, made["path"], same_repo, secret=made["secret"],
                                event="pull_request")
    assert status == 201 and got["untrusted"] is False
    grant = await srv.claim_run(got["run_id"])
    assert grant["secrets"] == {"DEPLOY_KEY": "hunter2"}


async def test_a_delivery_goes_to_handlers_or_the_workflow_never_both(srv: Server) -> None:
    await put_workflow(srv, "ci")
    await put_workflow(srv, "on-push")
    (await srv.user("POST", "/handlers", {"name": "h", "event": "webhook.push",
                                          "workflow": "on-push"})).ok(201)
    direct = await hook(srv, "direct", workflow="ci")
    bus = await hook(srv, "bus")
    status, got = await deliver(srv, direct["path"], PUSH, secret=direct["secret"])
    assert status == 201 and got["event_id"] is None
    assert len(await runs_of(srv, "ci")) == 1 and await runs_of(srv, "on-push") == []
    status, got = await deliver(srv, bus["path"], PUSH, secret=bus["secret"])
    assert (status, got["outcome"], got["run_id"]) == (202, "published", None)
    assert len(await runs_of(srv, "ci")) == 1
    handled = await runs_of(srv, "on-push")
    assert len(handled) == 1
    trig = (await srv.show(handled[0]["id"]))["input"]["trigger"]
    assert trig["kind"] == "event" and trig["name"] == "webhook.push" and trig["depth"] == 0
    assert trig["payload"]["kind"] == "webhook" and trig["payload"]["sha"] == "abc123"
    # A fork's delivery on the bus makes its handler runs untrusted too.
    status, got = await deliver(srv, bus["path"], FORK_PR, secret=bus["secret"],
                                event="pull_request")
    (await srv.user("POST", "/handlers", {"name": "pr", "event": "webhook.pull_request",
                                          "workflow": "on-push"})).ok(201)
    status, got = await deliver(srv, bus["path"], {**FORK_PR, "number": 8},
                                secret=bus["secret"], event="pull_request")
    assert status == 202
    newest = (await runs_of(srv, "on-push"))[0]
    shown = await srv.show(newest["id"])
    assert shown["input"]["trigger"]["payload"]["event"] == "pull_request"
    async with await srv.connect() as conn:
        row = await (await conn.execute("SELECT untrusted FROM cryo.runs WHERE id = %s",
                                        (newest["id"],))).fetchone()
    assert row == (True,)


# -- commit status --------------------------------------------------------------------------

async def receiver() -> tuple[web.AppRunner, int, list[dict[str, Any]]]:
    got: list[dict[str, Any]] = []

    async def take(request: web.Request) -> web.Response:
        got.append({"path": request.path, "body": await request.json()})
        return web.json_response({}, status=201)

    app = web.Application()
    app.router.add_post("/{tail:.*}", take)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port, got


async def test_commit_status_is_posted_when_the_run_ends(srv: Server,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    runner, port, got = await receiver()
    try:
        await put_workflow(srv, "ci")
        monkeypatch.delenv("CRYOPG_FORGE_ALLOWLIST", raising=False)
        refused = await srv.user("POST", "/webhooks", {
            "name": "x", "workflow": "ci", "status_url": f"http://127.0.0.1:{port}/s"})
        assert "must be https" in refused.refused(400, "invalid_argument")
        monkeypatch.setenv("CRYOPG_FORGE_ALLOWLIST", "127.0.0.1")
        made = await hook(srv, "gh", workflow="ci",
                          status_url=f"http://127.0.0.1:{port}/repos/o/r/statuses/{{sha}}")
        status, delivered = await deliver(srv, made["path"], PUSH, secret=made["secret"])
        assert status == 201
        assert await triggers.send_statuses(srv.app) == 0  # the run has not ended
        await srv.finish(await srv.claim_run(delivered["run_id"]), "failed", 3)
        assert await triggers.send_statuses(srv.app) == 1
        assert got[0]["path"] == "/repos/o/r/statuses/abc123"
        assert got[0]["body"]["state"] == "failure" and got[0]["body"]["exit_code"] == 3
        assert got[0]["body"]["run_id"] == delivered["run_id"]
        assert await triggers.send_statuses(srv.app) == 0  # sent once
        # A private address without the allowlist is refused, and says why.
        made = await hook(srv, "private", workflow="ci",
                          status_url=f"https://127.0.0.1:{port}/s")
        monkeypatch.delenv("CRYOPG_FORGE_ALLOWLIST")
        status, delivered = await deliver(srv, made["path"], PUSH, secret=made["secret"])
        await srv.finish(await srv.claim_run(delivered["run_id"]))
        assert await triggers.send_statuses(srv.app) == 0
        assert len(got) == 1
        async with await srv.connect() as conn:
            row = await (await conn.execute(
                "SELECT state, last_error FROM cryo.read_status_post(%s)",
                (delivered["run_id"],))).fetchone()
        assert row[0] == "failed" and "not a public address" in row[1]
    finally:
        await runner.cleanup()


# -- event handlers -------------------------------------------------------------------------

async def test_a_handler_chain_stops_at_depth_five_visibly(srv: Server) -> None:
    await put_workflow(srv, "relay")
    done = await srv.cli("handler", "create", "relay", "--event", "ping", "--workflow", "relay")
    assert done.returncode == 0, done.stderr
    (await srv.user("POST", "/events/ping", {"payload": {"hop": 0}})).ok(201)
    chain: list[str] = []
    for hop in range(5):
        grant = await srv.claim()
        assert grant is not None, f"no handler run at hop {hop}"
        chain.append(grant["run_id"])
        trig = grant["input"]["trigger"]
        assert (trig["kind"], trig["name"], trig["depth"]) == ("event", "ping", hop)
        assert trig["payload"] == {"hop": hop}
        (await srv.in_run(grant, "emit", ordinal=0, name="ping", payload={"hop": hop + 1})).ok()
        await srv.finish(grant)
    assert await srv.claim() is None  # the fifth emit started nothing
    events = (await srv.user("GET", "/events?name=ping")).ok()["events"]
    assert [e["depth"] for e in events] == [5, 4, 3, 2, 1, 0]
    assert "handler depth 5" in events[0]["refused"]
    assert all(e["refused"] is None for e in events[1:])
    last = await srv.show(chain[-1])
    assert any(h["kind"] == "handler_refused" for h in last["history"])
    assert last["triggered_by"] == {"kind": "event", "name": "relay", "depth": 4}
    listed = await srv.cli("events")
    assert "handler depth 5" in listed.stdout.splitlines()[1]


async def test_one_run_per_event_in_the_publishing_transaction(srv: Server) -> None:
    await put_workflow(srv, "bill")
    (await srv.user("POST", "/handlers", {"name": "b", "event": "order.created",
                                          "workflow": "bill"})).ok(201)
    async with await srv.connect() as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            async with conn.transaction():
                await conn.execute("SELECT cryo.publish_event('dev', 'default', 'order.created', "
                                   "'{\"id\": 1}')")
                await conn.execute("SELECT 1/0")
        assert await runs_of(srv, "bill") == []  # rolled back with the publish
        await conn.execute("SELECT cryo.publish_event('dev', 'default', 'order.created', "
                           "'{\"id\": 2}')")
    runs = await runs_of(srv, "bill")
    assert len(runs) == 1
    assert (await srv.show(runs[0]["id"]))["input"]["trigger"]["payload"] == {"id": 2}
    bad = await srv.user("POST", "/handlers", {"name": "b:x", "event": "e", "workflow": "bill"})
    assert "handler name" in bad.refused(400, "invalid_argument")
    (await srv.user("POST", "/handlers", {"name": "c", "event": "e", "workflow": "nope"})
     ).refused(404, "not_found")
    assert (await srv.cli("handler", "delete", "b")).returncode == 0
    await srv.user("POST", "/events/order.created", {"payload": {}})
    assert len(await runs_of(srv, "bill")) == 1


# -- cancel_on ------------------------------------------------------------------------------

async def wait_status(srv: Server, run_id: str, want: str) -> dict[str, Any]:
    for _ in range(100):
        run = await srv.show(run_id)
        if run["status"] == want:
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} is {run['status']}, not {want}")


async def test_cancel_on_cancels_a_graph_run_when_its_event_is_published(srv: Server) -> None:
    doc = graph(cancel_on={"event": "pr.closed"})
    first = (await srv.user("POST", "/runs", {"source": doc, "filename": "g.json"})).ok(201)
    other = (await srv.user("POST", "/runs", {"source": graph(), "filename": "g.json"})).ok(201)
    await wait_status(srv, first["run_id"], "parked")
    await wait_status(srv, other["run_id"], "parked")
    (await srv.user("POST", "/events/pr.opened", {})).ok(201)
    assert (await srv.show(first["run_id"]))["status"] == "parked"
    (await srv.user("POST", "/events/pr.closed", {"payload": {"n": 1}})).ok(201)
    run = await srv.show(first["run_id"])
    assert run["status"] == "cancelled"
    assert any(h["kind"] == "cancel_on" and h["name"] == "pr.closed" for h in run["history"])
    assert (await srv.show(other["run_id"]))["status"] == "parked"
    # A run started after the event is not cancelled by it.
    later = (await srv.user("POST", "/runs", {"source": doc, "filename": "g.json"})).ok(201)
    await wait_status(srv, later["run_id"], "parked")


# -- pipelines carry their triggers -------------------------------------------------------

PIPELINE = """\
version: cryosleep/pipeline/v1
if: "trigger.ref == 'refs/heads/main'"
cancel_on: {event: pr.closed}
on:
  schedule: "*/5 * * * *"
  webhook: [push]
  event: order.created
jobs:
  hold: {wait_for_signal: {name: go}}
"""


async def test_a_stored_pipeline_registers_its_triggers_and_keeps_if_and_cancel_on(
        srv: Server) -> None:
    await put_workflow(srv, "ci", PIPELINE, "ci.yaml")
    assert [s["name"] for s in (await srv.user("GET", "/schedules")).ok()["schedules"]] == ["ci:1"]
    handlers = (await srv.user("GET", "/handlers")).ok()["handlers"]
    assert [(h["event"], h["workflow"]) for h in handlers] == [("order.created", "ci")]
    made = await hook(srv, "gh", workflow="ci")
    status, got = await deliver(srv, made["path"], {**PUSH, "ref": "refs/heads/dev"},
                                secret=made["secret"])
    assert (status, got["outcome"]) == (202, "skipped")  # the pipeline's if, before any run
    status, got = await deliver(srv, made["path"], PUSH, secret=made["secret"])
    assert (status, got["outcome"]) == (201, "started")
    run_id = got["run_id"]
    assert (await srv.show(run_id))["pipeline"]
    await wait_status(srv, run_id, "parked")
    (await srv.user("POST", "/events/pr.closed", {})).ok(201)
    assert (await srv.show(run_id))["status"] == "cancelled"  # the pipeline's cancel_on
