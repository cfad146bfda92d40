"""`cryopg artifact` inside a run without click (cryopg/cli/artifact_socket.py): plainly
valid calls are served against the agent socket, anything else is left to click."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cryopg.cli.artifact_socket import fast


class Agent(threading.Thread):
    """One-connection-at-a-time stand-in for the agent's socket: records each request
    line and the bytes after it, answers from `replies`."""

    def __init__(self, path: Path, replies: list[tuple[dict[str, Any], bytes]]) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen()
        self.replies = replies
        self.seen: list[tuple[dict[str, Any], bytes]] = []

    def run(self) -> None:
        for reply, payload in self.replies:
            conn, _ = self.sock.accept()
            with conn, conn.makefile("rb") as stream:
                req = json.loads(stream.readline())
                body = stream.read(req.get("size", 0)) if req["op"] == "artifact.put" else b""
                self.seen.append((req, body))
                conn.sendall(json.dumps(reply).encode() + b"\n" + payload)


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    path = tmp_path / "agent.sock"
    monkeypatch.setenv("CRYO_SOCKET", str(path))
    monkeypatch.chdir(tmp_path)

    def start(*replies: tuple[dict[str, Any], bytes]) -> Agent:
        a = Agent(path, list(replies))
        a.start()
        return a
    yield start


def test_calls_click_should_judge_are_left_to_it(agent: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f").write_bytes(b"x")
    for argv in (["artifact", "put", "n", "missing"], ["artifact", "put", "n"],
                 ["artifact", "put", "n", "f", "--bogus"], ["artifact", "--help"],
                 ["artifact", "get", "n", "--key", "k", "--run", "r"],
                 ["artifact", "list", "--json", "--json"], ["artifact", "get"],
                 ["artifact", "put", "n", "f", "--key"], ["artifact", "frob"]):
        assert fast(argv) is None, argv
    monkeypatch.delenv("CRYO_SOCKET")
    assert fast(["artifact", "put", "n", "f"]) is None  # outside a run: HTTP, via click


def test_put_get_and_list_over_the_socket(agent: Any, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    data = b"some bytes\n" * 1000
    digest = hashlib.sha256(data).hexdigest()
    (tmp_path / "in.bin").write_bytes(data)
    row = {"name": "n", "sha256": digest, "size": len(data), "key": "k", "run_id": None}
    a = agent(({"ok": True, **row}, b""), ({"ok": True, **row}, data),
              ({"ok": True, "artifacts": [row]}, b""),
              ({"ok": False, "error": {"code": "not_found", "message": "no artifact 'x'"}}, b""))
    assert fast(["artifact", "put", "n", "in.bin", "--key=k"]) == 0
    assert fast(["artifact", "get", "n", "out/copy.bin", "--key", "k"]) == 0
    assert (tmp_path / "out" / "copy.bin").read_bytes() == data
    assert fast(["artifact", "list", "--cached"]) == 0
    assert fast(["artifact", "get", "x"]) == 2  # a refusal
    a.join(5)
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"{digest}\t{len(data)}\tn",
                                f"n\t{len(data)}\t{digest[:12]}\tkey=k"]
    assert err == "Error: no artifact 'x'\n"
    assert [r["op"] for r, _ in a.seen] == ["artifact.put", "artifact.get", "artifact.list",
                                            "artifact.get"]
    assert a.seen[0] == ({"op": "artifact.put", "name": "n", "key": "k", "size": len(data)}, data)
    assert a.seen[2][0] == {"op": "artifact.list", "run": None, "cached": True}
    assert not (tmp_path / "x").exists()


def test_a_download_that_does_not_match_lands_nothing(agent: Any, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    agent(({"ok": True, "name": "n", "sha256": "0" * 64, "size": 3}, b"abc"))
    assert fast(["artifact", "get", "n"]) == 1
    assert "do not match" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.sock"]
