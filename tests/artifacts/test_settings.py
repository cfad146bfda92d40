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
