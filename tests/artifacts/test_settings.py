"""Artifact settings: the default directory, and that tests never write into the checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cryopg.artifacts.settings import DEFAULT_DIR, ArtifactSettings

CHECKOUT = Path(__file__).resolve().parents[2]


def test_tests_keep_artifact_bytes_out_of_the_checkout() -> None:
    where = Path(os.environ["CRYOPG_ARTIFACTS_DIR"]).resolve()
    assert not where.is_relative_to(CHECKOUT), where


def test_the_default_directory_is_beside_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert ArtifactSettings.from_env({}).directory == tmp_path / DEFAULT_DIR
    assert ArtifactSettings.from_env({"CRYOPG_ARTIFACTS_DIR": "/x"}).directory == Path("/x")


def test_bad_settings_are_one_line_errors() -> None:
    for env, words in (({"CRYOPG_ARTIFACTS_MAX_BYTES": "lots"}, "CRYOPG_ARTIFACTS_MAX_BYTES"),
                       ({"CRYOPG_RETENTION_ARTIFACTS": "-1"}, "CRYOPG_RETENTION_ARTIFACTS"),
                       ({"CRYOPG_ARTIFACTS_PROXY": "maybe"}, "CRYOPG_ARTIFACTS_PROXY")):
        with pytest.raises(ValueError, match=words):
            ArtifactSettings.from_env(env)


def test_the_store_and_client_bounds() -> None:
    from cryopg.artifacts.settings import DEFAULT_STORE_TIMEOUT, client_timeout

    assert ArtifactSettings.from_env({}).store_timeout == DEFAULT_STORE_TIMEOUT
    got = ArtifactSettings.from_env({"CRYOPG_ARTIFACTS_STORE_TIMEOUT": "3s"}).store_timeout
    assert got.total_seconds() == 3
    with pytest.raises(ValueError, match="CRYOPG_ARTIFACTS_STORE_TIMEOUT"):
        ArtifactSettings.from_env({"CRYOPG_ARTIFACTS_STORE_TIMEOUT": "soon"})
    assert client_timeout({}) == 30
    assert client_timeout({"CRYOPG_ARTIFACTS_TIMEOUT": "2.5"}) == 2.5
    for bad in ("0", "-1", "never", "inf"):  # a bound that is no bound is the default
        assert client_timeout({"CRYOPG_ARTIFACTS_TIMEOUT": bad}) == 30
