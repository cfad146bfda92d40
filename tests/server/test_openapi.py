"""The OpenAPI document names exactly the router's routes, and schemathesis, fuzzing
every operation of it against the in-process server on the real test database, earns
no 5xx (its not_a_server_error check). Loopback only; a bounded number of examples."""

from __future__ import annotations

import asyncio
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from cryopg.seal import MasterKey, generate_master_key, parse_master_key
from cryopg.server.app import build_app
from cryopg.server.config import ServerConfig
from cryopg.server.openapi import OPENAPI_PATH, ROUTES, document
from tests.server.conftest import Server

EXAMPLES = 10  # per operation: about 80 operations, about a minute in all
# Live streams (server-sent events) stay open while the project lives: fuzzing them
# would wait forever, so they are in the document but not fuzzed.
NOT_FUZZED = {("GET", "/api/v1/orgs/{org}/projects/{project}/stream"),
              ("GET", "/api/v1/orgs/{org}/projects/{project}/runs/{run}/stream")}
# Aimed at the dev project, this would delete it and leave the rest nothing to reach.
NOT_AIMED = {("DELETE", "/api/v1/orgs/{org}/projects/{project}")}


def _router_routes() -> tuple[set[tuple[str, str]], set[str]]:
    config = ServerConfig("postgresql:///unused", MasterKey(parse_master_key(
        generate_master_key())))
    api, other = set(), set()
    for route in build_app(config).router.routes():
        path = route.resource.canonical if route.resource else ""
        if route.method == "HEAD":
            continue  # aiohttp adds one beside every GET
        if path.startswith("/api/"):
            api.add((route.method, path))
        else:
            other.add(path)
    return api, other


def test_the_document_names_every_route_and_only_routes() -> None:
    api, other = _router_routes()
    documented = {(method, path) for method, path, *_ in ROUTES}
    assert api - documented == set(), "routes missing from cryopg/server/openapi.py"
    assert documented - api == set(), "documented routes the router does not have"
    # the web UI's page and static files, and Prometheus's /metrics (docs/operations.md)
    assert other == {"/", "/ui", "/metrics"}
    assert len(documented) == len(ROUTES)  # no route listed twice


async def test_the_document_is_served_and_is_openapi_3(srv: Server) -> None:
    served = (await srv.request("GET", OPENAPI_PATH, token=None)).ok()
    assert served == document() and served["openapi"].startswith("3.")
    schema = schemathesis.openapi.from_dict(served)
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) == len(ROUTES)


def _aim(case: Any, real: dict[str, str]) -> None:
    """Points a generated case at what exists (the dev org and project, a live run, its
    claim token), so the fuzzed bodies and queries reach the handlers, not only the
    404 of an unknown org."""
    for name in ("org", "project", "run"):
        if name in (case.path_parameters or {}):
            case.path_parameters[name] = real[name]
    if isinstance(case.body, dict) and "claim_token" in case.body:
        case.body["claim_token"] = real["claim_token"]


def _fuzz_one(operation: Any, base_url: str, token: str, real: dict[str, str] | None) -> None:
    """EXAMPLES cases of one operation; half aimed at `real` (when given) by _aim."""

    @hypothesis.given(case=operation.as_strategy(), aimed=st.booleans())
    @hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None,
                         derandomize=True, phases=[Phase.explicit, Phase.generate],
                         suppress_health_check=list(HealthCheck))
    def run(case: Any, aimed: bool) -> None:
        if aimed and real is not None:
            _aim(case, real)
        response = case.call(base_url=base_url, timeout=30,
                             headers={"Authorization": f"Bearer {token}"})
        case.validate_response(response, checks=[not_a_server_error])

    run()


def _fuzz(doc: dict[str, Any], base_url: str, tokens: dict[str, str],
          real: dict[str, str]) -> list[str]:
    """Runs in a thread (schemathesis calls are blocking; the app's loop keeps serving).
    Returns a line per operation that answered a 5xx."""
    schema = schemathesis.openapi.from_dict(doc)
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        key = (operation.method.upper(), operation.path)
        if key in NOT_FUZZED:
            continue
        agent = operation.path.startswith("/api/v1/agent/")
        try:
            _fuzz_one(operation, base_url, tokens["agent" if agent else "owner"],
                      None if key in NOT_AIMED else real)
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - reported together
            # (schemathesis reports failures as a FailureGroup, a BaseExceptionGroup)
            failures.append(f"{key[0]} {key[1]}: {str(exc).strip()[:1500]}")
    return failures


@pytest.mark.slow
async def test_schemathesis_finds_no_server_error(srv: Server) -> None:
    doc = (await srv.request("GET", OPENAPI_PATH, token=None)).ok()
    grant = await srv.claim_run(await srv.submit())
    real = {"org": "dev", "project": "default", "run": grant["run_id"],
            "claim_token": grant["claim_token"]}
    failures = await asyncio.get_running_loop().run_in_executor(
        None, _fuzz, doc, srv.url, srv.tokens, real)
    assert failures == [], "\n\n".join(failures)
