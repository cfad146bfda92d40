"""Fork trust from the payload (issue 20): a delivery whose code may come from a fork
starts an untrusted run (no secrets), whatever its event header says.

Each case is a signed delivery as a forge sends it; the attack is the header (an event
name other than `pull_request`, or its case changed) or a head repository that is
missing, null or deleted."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from cryopg.triggers.webhook import untrusted_delivery
from tests.server.conftest import AGENT_CAPS, Server
from tests.server.test_triggers import deliver, hook, put_workflow

BASE = {"full_name": "o/r", "id": 1, "url": "https://api.github.com/repos/o/r"}
FORK = {"full_name": "mallory/r", "id": 2, "url": "https://api.github.com/repos/mallory/r"}


def _pr(head_repo: Any) -> dict[str, Any]:
    return {"number": 7,
            "head": {"ref": "feature", "sha": "f00d", "repo": head_repo},
            "base": {"ref": "main", "sha": "b00c", "repo": BASE}}


def _suite(head_repo: Any, base: Any = BASE) -> dict[str, Any]:
    """A check suite's pull_requests entry carries repos as {id, url, name} only."""
    def short(r: Any) -> Any:
        return r if not isinstance(r, dict) else {k: r[k] for k in ("id", "url")} | {"name": "r"}
    return {"head_branch": "feature", "head_sha": "f00d",
            "pull_requests": [{"head": {"ref": "feature", "sha": "f00d", "repo": short(head_repo)},
                               "base": {"ref": "main", "sha": "b00c", "repo": short(base)}}]}


def _workflow_run(head_repo: Any) -> dict[str, Any]:
    return {"workflow_run": {"head_branch": "feature", "head_sha": "f00d",
                             "head_repository": head_repo, "repository": BASE},
            "repository": BASE}


UNTRUSTED: dict[str, tuple[str, dict[str, Any]]] = {
    "pull_request fork": ("pull_request", {"action": "opened", "pull_request": _pr(FORK)}),
    "Pull_Request header case": ("Pull_Request",
                                 {"action": "opened", "pull_request": _pr(FORK)}),
    "review of a fork's PR": ("pull_request_review",
                              {"action": "submitted", "review": {"id": 1},
                               "pull_request": _pr(FORK)}),
    "review comment": ("pull_request_review_comment",
                       {"action": "created", "comment": {"id": 1},
                        "pull_request": _pr(FORK)}),
    "pull_request_target": ("pull_request_target",
                            {"action": "opened", "pull_request": _pr(FORK)}),
    "deleted fork (repo null)": ("pull_request",
                                 {"action": "closed", "pull_request": _pr(None)}),
    "head without a repo": ("pull_request_review",
                            {"pull_request": {"head": {"ref": "x"}, "base": {"repo": BASE}}}),
    "pull_request naming no head": ("pull_request", {"action": "opened", "number": 7}),
    "workflow_run from a fork": ("workflow_run", _workflow_run(FORK)),
    "workflow_run head missing": ("workflow_run", _workflow_run(None)),
    "workflow_run head unnamed": ("workflow_run", _workflow_run({"name": "r"})),
    "check_suite of a fork's PR": ("check_suite", {"check_suite": _suite(FORK),
                                                   "repository": BASE}),
    "check_suite, PRs left out (fork)": ("check_suite",
                                         {"check_suite": {"head_sha": "f00d",
                                                          "pull_requests": []},
                                          "repository": BASE}),
    "check_run of a fork's PR": ("check_run", {"check_run": {"check_suite": _suite(FORK),
                                                             "pull_requests": []},
                                               "repository": BASE}),
    "push carrying a fork's PR": ("push", {"ref": "refs/heads/x", "after": "f00d",
                                           "pull_request": _pr(FORK), "repository": BASE}),
    "custom event naming a fork head": ("deploy", {"head": {"repo": FORK},
                                                   "base": {"repo": BASE}}),
}

TRUSTED: dict[str, tuple[str, dict[str, Any]]] = {
    "push": ("push", {"ref": "refs/heads/main", "after": "abc", "repository": BASE}),
    "same-repo pull_request": ("pull_request", {"action": "opened", "pull_request": _pr(BASE)}),
    "same-repo review": ("pull_request_review", {"review": {"id": 1},
                                                 "pull_request": _pr(BASE)}),
    "same-repo workflow_run": ("workflow_run", _workflow_run(BASE)),
    "same-repo check_suite": ("check_suite", {"check_suite": _suite(BASE),
                                              "repository": BASE}),
    "a generic webhook": ("webhook", {"hello": "world"}),
}


@pytest.mark.parametrize("event, payload", UNTRUSTED.values(), ids=list(UNTRUSTED))
def test_a_delivery_that_may_carry_a_forks_code_is_untrusted(event: str,
                                                            payload: dict[str, Any]) -> None:
    assert untrusted_delivery(event, payload) is True


@pytest.mark.parametrize("event, payload", TRUSTED.values(), ids=list(TRUSTED))
def test_a_delivery_of_the_repository_itself_stays_trusted(event: str,
                                                          payload: dict[str, Any]) -> None:
    assert untrusted_delivery(event, payload) is False


def test_a_payload_too_big_to_look_through_is_untrusted() -> None:
    many = {"items": [{"x": i} for i in range(250_000)], "repository": BASE}
    assert untrusted_delivery("push", many) is True


async def test_each_fork_variant_starts_a_run_without_secrets(srv: Server) -> None:
    await put_workflow(srv, "ci")
    (await srv.user("PUT", "/secrets/DEPLOY_KEY", {"value": "hunter2"})).ok(201)
    made = await hook(srv, "gh", workflow="ci")
    for name, (event, payload) in UNTRUSTED.items():
        body = copy.deepcopy(payload) | {"case": name}  # a distinct body: no dedup
        status, got = await deliver(srv, made["path"], body, secret=made["secret"],
                                    event=event)
        assert status == 201 and got["untrusted"] is True, (name, got)
        assert await srv.claim() is None, name  # only an isolating agent takes it
        grant = await srv.claim_run(got["run_id"], caps=[*AGENT_CAPS, "isolated"])
        assert grant["untrusted"] is True, name
        assert grant["secrets"] == {} and grant["withheld"] == ["DEPLOY_KEY"], name
        assert "hunter2" not in json.dumps(grant), name
        await srv.finish(grant)
    # The control: the base repository's own delivery still gets its secrets.
    status, got = await deliver(srv, made["path"], TRUSTED["same-repo review"][1],
                                secret=made["secret"], event="pull_request_review")
    assert status == 201 and got["untrusted"] is False
    grant = await srv.claim_run(got["run_id"])
    assert grant["secrets"] == {"DEPLOY_KEY": "hunter2"}
    assert grant["input"]["trigger"]["ref"] == "feature"
