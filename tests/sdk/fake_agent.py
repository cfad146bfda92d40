"""A fake agent socket for SDK unit tests: it answers scripted exchanges, one request per
connection, and records what it was sent. It stands in for the agent, not the database."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any


class FakeAgent:
    def __init__(self, path: str, exchanges: list[dict[str, Any]]) -> None:
        self.path = path
        self.exchanges = exchanges
        self.received: list[Any] = []  # each request, decoded (or the raw text if not JSON)
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen(8)
        self._sock.settimeout(0.02)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        try:
            self.received.append(json.loads(data))
        except ValueError:
            self.received.append(data.decode(errors="replace"))
        index = len(self.received) - 1
        if index >= len(self.exchanges):
            reply: Any = {"ok": False, "error": {"code": "unexpected", "message": "extra call"}}
            conn.sendall(json.dumps(reply).encode() + b"\n")
            return
        exchange = self.exchanges[index]
        if "reply_raw" in exchange:
            conn.sendall(exchange["reply_raw"].encode())
        elif exchange["reply"] is not None:
            conn.sendall(json.dumps(exchange["reply"]).encode() + b"\n")
        # a reply of None: close without answering (a park, or an agent gone)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


def same_request(got: Any, want: dict[str, Any], json_fields: list[str]) -> bool:
    """Compare a received request with a vector's: JSON equality (numbers by value), and the
    `json_fields` compared after decoding the JSON text they hold."""
    if not isinstance(got, dict) or got.keys() != want.keys():
        return False
    for key, value in want.items():
        mine = got[key]
        if key in json_fields:
            try:
                if json.loads(mine) != json.loads(value):
                    return False
            except (TypeError, ValueError):
                return False
        elif mine != value or isinstance(mine, bool) != isinstance(value, bool):
            return False
    return True
