"""Artifacts on an S3 endpoint (moto's server mode): an agent uploads and downloads with
URLs the store signed, a user download is a redirect to one, and with
CRYOPG_ARTIFACTS_PROXY the bytes go through the server instead."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator

import aiohttp
import pytest

from tests.artifacts_s3 import _free_port, moto_s3
from tests.server.conftest import AGENT_CAPS, AGENT_PATH, PROJECT_PATH, Server


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Listed before `srv`, so the app starts on the bucket."""
    with moto_s3() as endpoint:
        monkeypatch.setenv("CRYOPG_ARTIFACTS_S3_BUCKET", "artifacts")
        monkeypatch.setenv("CRYOPG_ARTIFACTS_S3_ENDPOINT", endpoint)
        monkeypatch.setenv("CRYOPG_ARTIFACTS_S3_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("CRYOPG_ARTIFACTS_S3_SECRET_ACCESS_KEY", "test")
        monkeypatch.delenv("CRYOPG_ARTIFACTS_MAX_BYTES", raising=False)
        monkeypatch.delenv("CRYOPG_ARTIFACTS_PROXY", raising=False)
        yield endpoint


@pytest.fixture
def proxied(s3: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("CRYOPG_ARTIFACTS_PROXY", "1")
    return s3


DATA = b"x" * (9 << 20) + b"end"  # past one part: a multipart upload when proxied


async def test_signed_urls_move_the_bytes(s3: str, srv: Server) -> None:
    digest = hashlib.sha256(DATA).hexdigest()
    run_id = await srv.submit("true\n")
    grant = await srv.claim_run(run_id)
    ready = (await srv.in_run(grant, "artifacts/prepare", sha256=digest, size=len(DATA))).ok()
    upload = ready["upload"]
    assert upload["method"] == "PUT" and upload["url"].startswith(s3)
    async with aiohttp.ClientSession() as plain:  # no agent token goes to the store
        async with plain.put(upload["url"], data=DATA, headers=upload["headers"]) as resp:
            assert resp.status == 200, await resp.text()
        row = (await srv.in_run(grant, "artifacts/commit", name="blob", sha256=digest,
                                size=len(DATA))).ok()
        assert row["sha256"] == digest
        found = (await srv.in_run(grant, "artifacts/find", name="blob")).ok()
        assert found["download"]["url"].startswith(s3)
        async with plain.get(found["download"]["url"]) as resp:
            assert await resp.read() == DATA
    # A user download redirects to a signed URL, or with ?redirect=0 streams.
    headers = {"Authorization": f"Bearer {srv.tokens['viewer']}"}
    path = f"{PROJECT_PATH}/runs/{run_id}/artifacts/blob"
    async with srv.client.get(path, headers=headers, allow_redirects=False) as resp:
        assert resp.status == 302 and resp.headers["Location"].startswith(s3)
    async with srv.client.get(path + "?redirect=0", headers=headers) as resp:
        assert resp.status == 200 and await resp.read() == DATA


async def test_proxy_mode_goes_through_the_server(proxied: str, srv: Server) -> None:
    digest = hashlib.sha256(DATA).hexdigest()
    run_id = await srv.submit("true\n")
    grant = await srv.claim_run(run_id)
    ready = (await srv.in_run(grant, "artifacts/prepare", sha256=digest, size=len(DATA))).ok()
    assert ready["upload"] == {"proxy": True}
    blob = f"{AGENT_PATH}/runs/{run_id}/artifacts/blobs/{digest}"
    claim = {"Authorization": f"Bearer {srv.tokens['agent']}",
             "X-Cryo-Claim": grant["claim_token"]}
    async with srv.client.put(blob, data=DATA, headers=claim) as resp:
        assert resp.status == 200, await resp.text()
    (await srv.in_run(grant, "artifacts/commit", name="blob", sha256=digest,
                      size=len(DATA))).ok()
    found = (await srv.in_run(grant, "artifacts/find", name="blob")).ok()
    assert found["download"] == {"proxy": True}
    async with srv.client.get(blob, headers=claim) as resp:
        assert resp.status == 200 and await resp.read() == DATA
    headers = {"Authorization": f"Bearer {srv.tokens['viewer']}"}
    async with srv.client.get(f"{PROJECT_PATH}/runs/{run_id}/artifacts/blob", headers=headers,
                              allow_redirects=False) as resp:
        assert resp.status == 200 and await resp.read() == DATA


async def test_the_sweep_removes_objects_no_index_knows(s3: str, srv: Server) -> None:
    import datetime as dt

    from cryopg.artifacts.service import ARTIFACTS, sweep_store

    store = srv.app[ARTIFACTS].store
    digest = hashlib.sha256(b"kept").hexdigest()
    headers = {"Authorization": f"Bearer {srv.tokens['member']}"}
    async with srv.client.put(f"{PROJECT_PATH}/artifacts/kept", params={"key": "k"},
                              data=b"kept", headers=headers) as resp:
        assert resp.status == 201, await resp.text()

    async def one(data: bytes) -> object:
        yield data

    orphan, _ = await store.put("dev", "default", one(b"orphan"))
    assert await sweep_store(srv.app) == 0  # both are younger than the grace period
    assert await sweep_store(srv.app, grace=dt.timedelta(0)) == 1
    assert await store.size("dev", "default", orphan) is None
    assert await store.size("dev", "default", digest) == 4


@pytest.fixture
def stoppable(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Callable[[], None]]]:
    """A proxied store and a way to stop it mid-test (listed before `srv`)."""
    port = _free_port()
    with contextlib.ExitStack() as running:
        endpoint = running.enter_context(moto_s3(port=port))
        for name, value in {"CRYOPG_ARTIFACTS_S3_BUCKET": "artifacts",
                            "CRYOPG_ARTIFACTS_S3_ENDPOINT": endpoint,
                            "CRYOPG_ARTIFACTS_S3_ACCESS_KEY_ID": "test",
                            "CRYOPG_ARTIFACTS_S3_SECRET_ACCESS_KEY": "test",
                            "CRYOPG_ARTIFACTS_PROXY": "1",
                            "CRYOPG_ARTIFACTS_STORE_TIMEOUT": "3"}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("CRYOPG_ARTIFACTS_MAX_BYTES", raising=False)
        yield endpoint, running.close


async def test_a_download_resumes_from_an_offset(proxied: str, srv: Server) -> None:
    digest = hashlib.sha256(DATA).hexdigest()
    run_id = await srv.submit("true\n")
    grant = await srv.claim_run(run_id)
    blob = f"{AGENT_PATH}/runs/{run_id}/artifacts/blobs/{digest}"
    claim = {"Authorization": f"Bearer {srv.tokens['agent']}",
             "X-Cryo-Claim": grant["claim_token"]}
    async with srv.client.put(blob, data=DATA, headers=claim) as resp:
        assert resp.status == 200, await resp.text()
    (await srv.in_run(grant, "artifacts/commit", name="blob", sha256=digest,
                      size=len(DATA))).ok()
    at = len(DATA) - 12345
    async with srv.client.get(blob, headers={**claim, "Range": f"bytes={at}-"}) as resp:
        assert resp.status == 206 and await resp.read() == DATA[at:]
        assert resp.headers["Content-Range"] == f"bytes {at}-{len(DATA) - 1}/{len(DATA)}"
    async with srv.client.get(blob, headers={**claim, "Range": "bytes=0-9"}) as resp:
        assert resp.status == 200 and await resp.read() == DATA  # other ranges: whole


async def test_a_store_that_is_down_is_a_503_naming_it(
        stoppable: tuple[str, Callable[[], None]], srv: Server) -> None:
    endpoint, stop = stoppable
    data = b"kept before the outage"
    digest = hashlib.sha256(data).hexdigest()
    run_id = await srv.submit("true\n")
    grant = await srv.claim_run(run_id)
    blob = f"{AGENT_PATH}/runs/{run_id}/artifacts/blobs/{digest}"
    claim = {"Authorization": f"Bearer {srv.tokens['agent']}",
             "X-Cryo-Claim": grant["claim_token"]}
    async with srv.client.put(blob, data=data, headers=claim) as resp:
        assert resp.status == 200, await resp.text()
    (await srv.in_run(grant, "artifacts/commit", name="kept", sha256=digest,
                      size=len(data))).ok()
    stop()
    named = f"S3 bucket 'artifacts' at {endpoint}"
    # An upload, a commit (which checks the store holds the bytes), a download: each a
    # 503 the agent retries, naming the store, within the store timeout (no hang).
    other = hashlib.sha256(b"during").hexdigest()
    async with srv.client.put(f"{AGENT_PATH}/runs/{run_id}/artifacts/blobs/{other}",
                              data=b"during", headers=claim) as resp:
        body = await resp.json()
        assert resp.status == 503 and body["error"]["code"] == "artifact_store_unavailable"
        assert named in body["error"]["message"], body
    refused = await srv.in_run(grant, "artifacts/commit", name="again", sha256=digest,
                               size=len(data))
    assert named in refused.refused(503, "artifact_store_unavailable")
    async with srv.client.get(blob, headers=claim) as resp:
        body = await resp.json()
        assert resp.status == 503 and named in body["error"]["message"], body


async def test_an_untrusted_run_uploads_through_the_server_and_learns_of_no_trusted_blob(
        s3: str, srv: Server) -> None:
    """Blobs are shared by content address, so an untrusted run is told a blob is there
    only when untrusted runs may know it, never gets a signed URL (which would let it
    skip the upload, or write other bytes under a trusted digest), and names a blob
    only after the server hashed its bytes (docs/security/trust.md)."""
    secret = b"low-entropy secret 4242"
    digest = hashlib.sha256(secret).hexdigest()
    trusted = await srv.claim_run(await srv.submit("true\n"))
    ready = (await srv.in_run(trusted, "artifacts/prepare", sha256=digest,
                              size=len(secret))).ok()
    async with aiohttp.ClientSession() as plain:
        async with plain.put(ready["upload"]["url"], data=secret,
                             headers=ready["upload"]["headers"]) as resp:
            assert resp.status == 200, await resp.text()
    (await srv.in_run(trusted, "artifacts/commit", name="creds", key="ci", sha256=digest,
                      size=len(secret))).ok()
    untrusted_id = await srv.submit("true\n", untrusted=True)
    grant = await srv.claim_run(untrusted_id, caps=[*AGENT_CAPS, "isolated"])
    # (a) The right guess is not confirmed: the answer is the same as for a wrong one.
    for guess in (digest, "0" * 64):
        ready = (await srv.in_run(grant, "artifacts/prepare", sha256=guess,
                                  size=len(secret), force=True)).ok()
        assert ready == {"present": False, "upload": {"proxy": True}}, ready
    # (b) Named by its digest alone: refused.
    (await srv.in_run(grant, "artifacts/commit", name="stolen", sha256=digest,
                      size=len(secret))).refused(409, "artifact_unverified")
    blob = f"{AGENT_PATH}/runs/{untrusted_id}/artifacts/blobs/{digest}"
    claim = {"Authorization": f"Bearer {srv.tokens['agent']}",
             "X-Cryo-Claim": grant["claim_token"]}
    async with srv.client.put(blob, data=b"other bytes of the size!", headers=claim) as resp:
        assert resp.status == 400, await resp.text()  # not the digest's bytes
    (await srv.in_run(grant, "artifacts/commit", name="stolen", sha256=digest,
                      size=len(secret))).refused(409, "artifact_unverified")
    # The bytes themselves, hashed by the server: its own artifact, and the trusted
    # one is untouched.
    async with srv.client.put(blob, data=secret, headers=claim) as resp:
        assert resp.status == 200, await resp.text()
    (await srv.in_run(grant, "artifacts/commit", name="mine", sha256=digest,
                      size=len(secret))).ok()
    found = (await srv.in_run(grant, "artifacts/find", name="mine")).ok()
    async with aiohttp.ClientSession() as plain:
        async with plain.get(found["download"]["url"]) as resp:
            assert await resp.read() == secret
    (await srv.in_run(grant, "artifacts/find", name="creds", key="ci")).refused(404, "not_found")
