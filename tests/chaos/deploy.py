"""The chaos tier's deployment, shared by every test under tests/chaos (its fixtures are
in conftest.py): real `cryopg server` replicas on one test database, agents split over
them, moto's S3 server behind a gate that can be shut, HAProxy in front, and one way to
kill any of these mid-work.

- `S3Store`: moto's server mode on loopback holding bucket `S3_BUCKET`, reached through a
  TCP gate. `stop()` shuts the gate (connections refused, open ones cut) and `start()`
  opens it again with the data kept (moto keeps objects in its memory, so killing moto
  itself would empty the store); `freeze()`/`thaw()` SIGSTOP/SIGCONT moto (requests hang
  until the client's timeout); `client()` is boto3 straight to moto.
- `Chaos`: replicas and agents on the test's fresh database, none started until asked:
  `replica(name, **env)` starts a `cryopg server` (fixed port, so `restart(name)` comes
  back at the same address), `kill(name)` SIGKILLs it, `agent(name)` starts one agent and
  `agents(n)` n of them round robin over the live replicas, `kill_agent(name)`,
  `balancer(...)` HAProxy in front of replicas, `api`/`raw`/`cli(replica, ...)` as a
  user, `sql(...)` on the database, `rss(name)` a process's memory; `env` is what every
  process started afterwards gets (`use_artifact_store` points it at an `S3Store`), and
  `log_store_env(s3, ...)` is the CRYOPG_LOGS_S3_* environment for one replica.
- `kill(proc)`: SIGKILL, of the process group or (`alone=True`) of the process only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest

from cryopg.seal import generate_master_key
from tests.conftest import _free_tcp_port, _healthy
from tests.e2e.helpers import token, wait_for

CLI = [sys.executable, "-m", "cryopg.cli.entry"]
S3_BUCKET = "cryopg-logs"
S3_KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
P = "/api/v1/orgs/dev/projects/default"
REPO = Path(__file__).resolve().parents[2]


# -- the object store ---------------------------------------------------------------------


class _Gate:
    """A TCP proxy on a fixed loopback port. Shut, nothing listens there (a connect is
    refused) and every open connection is cut; open again, it listens on the same port."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = _free_tcp_port()
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    def open(self) -> None:
        if self._listener is not None:
            return
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(128)
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def shut(self) -> None:
        sock, self._listener = self._listener, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                client, _ = sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not sock:  # shut meanwhile
                    client.close()
                    server.close()
                    return
                self._conns |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            src.close()


class S3Store:
    """moto's S3 server behind a `_Gate`: the URL servers are given is the gate's."""

    def __init__(self, dir: Path, bucket: str = S3_BUCKET) -> None:
        self.bucket = bucket
        self.moto_port = _free_tcp_port()
        self.log = open(dir / "moto.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.moto_port)],
            stdout=self.log, stderr=self.log, start_new_session=True)
        self.gate = _Gate(self.moto_port)
        self.url = f"http://127.0.0.1:{self.gate.port}"
        wait_for("moto's S3 server", self._make_bucket, timeout=30)
        self.gate.open()

    def _make_bucket(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError("moto's S3 server exited; see moto.log")
        try:
            self.client().create_bucket(Bucket=self.bucket)
            return True
        except Exception:  # noqa: BLE001 - not listening yet
            return False

    def client(self) -> Any:
        """boto3 straight to moto (not through the gate): what the store really holds."""
        return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.moto_port}",
                            region_name="us-east-1", **S3_KEYS)

    def make_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def stop(self) -> None:
        """The store unreachable: connections refused, those open cut. Data is kept."""
        self.gate.shut()

    def start(self) -> None:
        self.gate.open()

    def freeze(self) -> None:
        """The store hangs: connections open, no answers (SIGSTOP)."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def keys(self, prefix: str = "", bucket: str | None = None) -> dict[str, int]:
        """Every object under `prefix`: key -> size."""
        out: dict[str, int] = {}
        pages = self.client().get_paginator("list_objects_v2").paginate(
            Bucket=bucket or self.bucket, Prefix=prefix)
        for page in pages:
            out.update({o["Key"]: int(o["Size"]) for o in page.get("Contents", [])})
        return out

    def uploads(self, bucket: str | None = None) -> list[str]:
        """Keys of multipart uploads begun and neither completed nor aborted."""
        got = self.client().list_multipart_uploads(Bucket=bucket or self.bucket)
        return [u["Key"] for u in got.get("Uploads", [])]

    def close(self) -> None:
        self.gate.shut()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


# -- replicas and agents ------------------------------------------------------------------


class Chaos:
    """Server replicas and agents on one database, each its own process group."""

    def __init__(self, dsn: str, dir: Path) -> None:
        self.dsn, self.dir = dsn, dir
        self.env = dict(os.environ, CRYOPG_MASTER_KEY=generate_master_key(),
                        PYTHONUNBUFFERED="1",
                        PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
        for name in ("CRYOPG_URL", "CRYOPG_TOKEN", "PYTEST_CURRENT_TEST"):
            self.env.pop(name, None)
        self.user_token = token(dsn, "user", member="owner")
        self.agent_token = token(dsn, "agent")
        self.ports: dict[str, int] = {}
        self.replica_env: dict[str, dict[str, str]] = {}
        self.servers: dict[str, subprocess.Popen[bytes]] = {}
        self.agent_procs: dict[str, subprocess.Popen[bytes]] = {}
        self.balancers: list[Balancer] = []
        self.logs: list[Path] = []

    # processes

    def _spawn(self, label: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        path = self.dir / f"{label}-{len(self.logs)}.log"
        self.logs.append(path)
        with open(path, "wb") as log:
            return subprocess.Popen([*CLI, *args], env=env, cwd=self.dir, stdout=log,
                                    stderr=log, start_new_session=True)

    def replica(self, name: str, *, claim_seconds: float = 2, tick: float = 0.2,
                **env: str) -> str:
        """Starts replica `name` (CRYOPG_REPLICA_ID) with extra environment; its URL."""
        self.ports.setdefault(name, _free_tcp_port())
        self.replica_env[name] = dict(env, CLAIM=str(claim_seconds), TICK=str(tick))
        self._start(name)
        return self.url(name)

    def _start(self, name: str) -> None:
        extra = dict(self.replica_env[name])
        claim, tick = extra.pop("CLAIM"), extra.pop("TICK")
        env = dict(self.env, CRYOPG_REPLICA_ID=name, **extra)
        self.servers[name] = self._spawn(
            f"server-{name}", ["server", "--database-url", self.dsn, "--port",
                               str(self.ports[name]), "--claim-seconds", claim,
                               "--tick-interval", tick], env)
        wait_for(f"replica {name}", lambda: self._up(name), timeout=60)

    def _up(self, name: str) -> bool:
        if self.servers[name].poll() is not None:
            raise RuntimeError(f"replica {name} exited: {self.logs[-1].read_text()[-2000:]}")
        return _healthy(self.url(name))

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def live(self) -> list[str]:
        return [n for n, p in self.servers.items() if p.poll() is None]

    def kill(self, name: str) -> None:
        """SIGKILL: no cleanup, its leases and transactions left as they were."""
        kill(self.servers[name])

    def restart(self, name: str) -> None:
        if self.servers[name].poll() is None:
            self.kill(name)
        self._start(name)

    def agent(self, name: str, replica: str = "r1", *, url: str | None = None,
              **env: str) -> subprocess.Popen[bytes]:
        """Agent `name` (its --id) on `replica`, or on `url` (a balancer, or several
        replicas' URLs joined by commas)."""
        self.agent_procs[name] = self._spawn(
            name, ["agent", "--url", url or self.url(replica), "--token", self.agent_token,
                   "--id", name], dict(self.env, **env))
        return self.agent_procs[name]

    def agents(self, n: int, replicas: list[str] | None = None, prefix: str = "agent",
               **env: str) -> list[str]:
        """n agents, round robin over `replicas` (default: the live ones); their names."""
        over = replicas or self.live()
        names = []
        for i in range(n):
            name = f"{prefix}-{len(self.agent_procs)}"
            self.agent(name, over[i % len(over)], **env)
            names.append(name)
        return names

    def kill_agent(self, name: str) -> None:
        """`kill -9` of the agent alone: what it started (its guard, its jobs) is left to
        the product to clean up."""
        kill(self.agent_procs[name], alone=True)

    def balancer(self, replicas: list[str] | None = None) -> Balancer:
        """HAProxy with deploy/haproxy.cfg's defaults in front of `replicas` (default:
        the live ones); skips the test where haproxy is not installed."""
        lb = Balancer(self.dir, {r: self.url(r) for r in replicas or self.live()})
        self.balancers.append(lb)
        return lb

    def rss(self, name: str) -> tuple[int, int]:
        """(resident now, peak resident) bytes of a replica's or agent's process."""
        proc = self.servers.get(name) or self.agent_procs[name]
        fields = dict(line.split(":", 1) for line in
                      Path(f"/proc/{proc.pid}/status").read_text().splitlines() if ":" in line)
        return (int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024)

    # talking to it

    def api(self, replica: str, method: str, path: str, body: Any = None,
            timeout: float = 30) -> tuple[int, Any]:
        """A user's call on one replica; `path` after /api/v1/orgs/dev/projects/default."""
        return _http(self.url(replica) + P + path, self.user_token, method, body, timeout)

    def raw(self, replica: str, path: str, timeout: float = 60) -> tuple[int, bytes]:
        """GET as a user, the body as bytes (a run's log)."""
        req = urllib.request.Request(self.url(replica) + P + path,
                                     headers={"Authorization": f"Bearer {self.user_token}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def cli(self, replica: str, *args: str,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = dict(self.env, CRYOPG_URL=self.url(replica), CRYOPG_TOKEN=self.user_token)
        return subprocess.run([*CLI, *args], env=env, cwd=self.dir, capture_output=True,
                              text=True, timeout=timeout)

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """A query on the deployment's database, without an interpreter start."""
        with psycopg.connect(self.dsn, autocommit=True) as db:
            return db.execute(query, params).fetchall()

    def submit(self, replica: str, source: str, filename: str = "job.sh") -> str:
        code, got = self.api(replica, "POST", "/runs", {"source": source, "filename": filename})
        assert code == 201, got
        return str(got["run_id"])

    def run(self, replica: str, run_id: str) -> dict[str, Any]:
        code, got = self.api(replica, "GET", f"/runs/{run_id}")
        assert code == 200, got
        return dict(got)

    @staticmethod
    def log_store_env(store: S3Store, *, move_after: float = 0, **extra: str) -> dict[str, str]:
        """CRYOPG_LOGS_S3_* for a replica moving logs to `store` (through its gate)."""
        return {**_s3_env("LOGS", store, store.bucket),
                "CRYOPG_LOGS_S3_MOVE_AFTER": str(move_after), **extra}

    def use_artifact_store(self, store: S3Store, bucket: str, **extra: str) -> None:
        """Every process started afterwards keeps artifacts in `bucket` of `store`
        (through its gate), not in the session's CRYOPG_ARTIFACTS_DIR."""
        store.make_bucket(bucket)
        for name in ("CRYOPG_ARTIFACTS_MAX_BYTES", "CRYOPG_ARTIFACTS_PROXY",
                     "CRYOPG_ARTIFACTS_DIR"):
            self.env.pop(name, None)
        self.env.update(_s3_env("ARTIFACTS", store, bucket), **extra)

    def tail_logs(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
                         for p in self.logs if p.exists())

    def close(self) -> None:
        for lb in self.balancers:
            lb.close()
        for proc in [*self.agent_procs.values(), *self.servers.values()]:
            kill(proc)


def kill(proc: subprocess.Popen[bytes], *, alone: bool = False) -> None:
    """SIGKILL `proc`'s process group, or with `alone` the process only (`kill -9 PID`:
    its children live on), and reap it at once (a zombie would still answer `kill -0`)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            if alone:
                os.kill(proc.pid, signal.SIGKILL)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _s3_env(what: str, store: S3Store, bucket: str) -> dict[str, str]:
    return {f"CRYOPG_{what}_S3_BUCKET": bucket, f"CRYOPG_{what}_S3_ENDPOINT": store.url,
            f"CRYOPG_{what}_S3_ACCESS_KEY_ID": S3_KEYS["aws_access_key_id"],
            f"CRYOPG_{what}_S3_SECRET_ACCESS_KEY": S3_KEYS["aws_secret_access_key"]}


# -- the balancer -------------------------------------------------------------------------


def haproxy_exe() -> str | None:
    return shutil.which("haproxy") or ("/usr/sbin/haproxy"
                                       if Path("/usr/sbin/haproxy").exists() else None)


class Balancer:
    """HAProxy with deploy/haproxy.cfg's `defaults` (abortonclose: a client gone closes
    its request to the server too) in front of `backends` (name -> URL), round robin."""

    def __init__(self, dir: Path, backends: dict[str, str]) -> None:
        exe = haproxy_exe()
        if exe is None:
            pytest.skip("haproxy is not installed (scripts/setup installs it with apt)")
        shipped = (REPO / "deploy" / "haproxy.cfg").read_text()
        defaults = re.search(r"^defaults\n((?:    .*\n)+)", shipped, re.M)
        assert defaults and "abortonclose" in defaults.group(1)
        port = _free_tcp_port()
        servers = "".join(f"    server {name} {url.removeprefix('http://')}\n"
                          for name, url in backends.items())
        cfg = dir / "haproxy.cfg"
        cfg.write_text(f"global\n    maxconn 256\ndefaults\n{defaults.group(1)}"
                       f"frontend cryopg\n    bind 127.0.0.1:{port}\n"
                       f"    default_backend replicas\nbackend replicas\n"
                       f"    balance roundrobin\n{servers}")
        self.proc = subprocess.Popen([exe, "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.url = f"http://127.0.0.1:{port}"
        wait_for("haproxy", lambda: _healthy(self.url), timeout=20)

    def close(self) -> None:
        kill(self.proc)


def _http(url: str, token: str, method: str, body: Any, timeout: float) -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw[:1] in (b"{", b"[") else raw)
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, (json.loads(raw) if raw[:1] == b"{" else raw)
