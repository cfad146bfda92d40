"""Logs and artifacts get their S3 clients from cryopg/objectstore.py, each with its own
timeouts: the log mover's fail fast (it retries next round), an artifact read may stream
as long as its bytes need but must hear from the store within the deployment's timeout,
and an artifact upload's request is bounded whole."""

from __future__ import annotations

import datetime as dt

from cryopg.artifacts.settings import S3Settings
from cryopg.artifacts.store import S3Store
from cryopg.logstore.objects import open_store
from cryopg.logstore.settings import LogStoreSettings


def test_the_log_store_fails_fast() -> None:
    store = open_store(LogStoreSettings("logs", endpoint="http://127.0.0.1:9",
                                        access_key_id="k"))
    assert store.client_options == {"allow_http": "true", "connect_timeout": "2s",
                                    "timeout": "5s"}
    assert store.retry_config["max_retries"] == 1
    assert store.retry_config["retry_timeout"] == dt.timedelta(seconds=5)
    # An access key without a secret gets an empty secret, as before.
    assert store.config["access_key_id"] == "k" and store.config["secret_access_key"] == ""


def test_artifact_reads_and_uploads_have_their_own_bounds() -> None:
    s3 = S3Settings("arts", "https://s3.example", "eu-west-1", None, None)
    store = S3Store(s3, timeout=dt.timedelta(seconds=7))
    reads, uploads = store._store, store._uploads
    assert reads.client_options == {"allow_http": "false", "connect_timeout": "5s",
                                    "read_timeout": "7s", "timeout": "1day"}
    assert uploads.client_options == {"allow_http": "false", "connect_timeout": "5s",
                                      "timeout": "1m"}
    for client in (reads, uploads):
        assert client.retry_config["max_retries"] == 2
        assert client.retry_config["retry_timeout"] == dt.timedelta(seconds=7)
        assert client.retry_config["backoff"]["max_backoff"] == dt.timedelta(seconds=1)
        # Without keys, the environment's credentials apply (no None reaches the client).
        assert "access_key_id" not in client.config
