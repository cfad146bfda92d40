"""Everything a job starts, as one thing the agent (or its guard) can kill.

Each job runs in its own session and process group, and, where this host lets the agent
create cgroup v2 groups (root, or a delegated subtree), in a cgroup of its own: a
descendant that ignores SIGHUP and SIGTERM, double-forks or calls setsid still sits in
it, and one write to `cgroup.kill` ends it. The job's leader is born inside the cgroup:
the agent steps into it for the fork and back out, so nothing the leader starts can run
before it is counted.

The agent kills the tree itself when the job ends, is cancelled, parks or loses its
claim. For when it cannot (it was killed, or it is stopped while the claim lapses) one
guard process per agent process (agent/guard.py) holds every live job's tree,
directories and claim deadline: it kills the tree and removes the plaintext when the
agent's pipe closes or the claim lapses unrenewed. A later agent on the host also reaps
cgroups that a dead agent and its guard both left (sweep_cgroups).

Without a writable cgroup v2 (CRYOPG_JOB_CGROUPS=off, or none here) the process group is
what gets killed: a descendant that left it with setsid survives its agent's death.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from agent import guard as guard_program

CGROUPS_ENV = "CRYOPG_JOB_CGROUPS"  # "off": kill process groups only
GUARD_PATH = Path(guard_program.__file__).resolve()


# -- cgroups -------------------------------------------------------------------------


class Cgroups:
    """Job cgroups beside the agent: `<agent's cgroup>/cryo-<agent pid>-<n>`."""

    def __init__(self, home: str) -> None:
        self.home = home  # the agent's own cgroup directory
        self._procs = os.path.join(home, "cgroup.procs")
        self._n = itertools.count(1)

    @classmethod
    def probe(cls) -> Cgroups | str:
        """Job cgroups for this process, or why there are none."""
        if (os.environ.get(CGROUPS_ENV) or "").strip().lower() == "off":
            return f"{CGROUPS_ENV}=off"
        home = _own_cgroup_dir()
        if home is None:
            return "no cgroup v2 hierarchy is mounted"
        cg = cls(home)
        try:
            path = cg.new()
        except OSError as e:
            return f"cannot create a cgroup under {home} ({e.strerror or e})"
        try:
            with cg.entered(path):
                pass
        except OSError as e:
            return f"cannot move a process into a cgroup under {home} ({e.strerror or e})"
        finally:
            remove(path)
        return cg

    def new(self) -> str:
        while True:
            path = os.path.join(self.home, f"{job_prefix()}{next(self._n)}")
            try:
                os.mkdir(path)
            except FileExistsError:
                continue
            return path

    @contextlib.contextmanager
    def entered(self, path: str) -> Iterator[None]:
        """The agent inside `path` for the block (a child forked now is born there),
        then back home. A write of our pid moves every thread of the agent; only the
        event loop's thread forks, so no other child lands there meanwhile."""
        _write(os.path.join(path, "cgroup.procs"), "0")
        try:
            yield
        finally:
            _write(self._procs, "0")


def kill(path: str) -> None:
    guard_program.kill_cgroup(path)


def remove(path: str) -> bool:
    return guard_program.remove_cgroup(path)


def sweep_cgroups(cg: Cgroups | None) -> int:
    """Kill and remove the job cgroups of agent processes that are gone (and whose guard
    did not get to it: both were killed). Returns how many."""
    if cg is None:
        return 0
    removed = 0
    try:
        names = os.listdir(cg.home)
    except OSError:
        return 0
    for name in names:
        pid = _agent_pid(name)
        if pid is None or alive(pid):
            continue
        path = os.path.join(cg.home, name)
        kill(path)
        if guard_program.remove_cgroup(path, 2.0):
            removed += 1
    return removed


def job_prefix() -> str:
    """Names a job's cgroup and directories after the agent's process, so a later
    agent can tell which ones a dead agent left behind."""
    return f"cryo-{os.getpid()}-"


def _agent_pid(name: str) -> int | None:
    parts = name.split("-")
    if len(parts) < 3 or parts[0] != "cryo" or not parts[1].isdigit():
        return None
    return int(parts[1])


def alive(pid: int) -> bool:
    """Whether a process of that id exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _own_cgroup_dir() -> str | None:
    """This process's cgroup v2 directory: the unified hierarchy's mount (pure v2 at
    /sys/fs/cgroup, or hybrid at /sys/fs/cgroup/unified) plus our path in it."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((line[3:].strip() for line in f if line.startswith("0::")), None)
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    if rel is None:
        return None
    for fields in mounts:
        sep = fields.index("-") if "-" in fields else -1
        if sep > 0 and fields[sep + 1] == "cgroup2":
            root, mount = fields[3], fields[4]
            inside = rel if root == "/" else rel.removeprefix(root)
            path = os.path.normpath(mount + "/" + inside.lstrip("/"))
            if os.path.isdir(path):
                return path
    return None


# -- the guard -----------------------------------------------------------------------


class Guard:
    """The agent process's guard (agent/guard.py), started on first use and again if it
    died; the jobs it watches are told again then."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._jobs: dict[str, list[dict[str, object]]] = {}  # key -> what it was told

    def _ensure(self) -> bool:
        """Whether a guard is running that was told everything but the message at hand."""
        if self._proc is not None and self._proc.poll() is None:
            return True
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(GUARD_PATH)], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, start_new_session=True)
            assert self._proc.stdin is not None
            os.set_blocking(self._proc.stdin.fileno(), False)
        except OSError as e:
            print(f"cryopg agent: cannot start the job guard ({e})", file=sys.stderr)
            self._proc = None
            return False
        for told in self._jobs.values():  # the message at hand among them
            for msg in told:
                self._send_now(msg)
        return False

    def _send_now(self, msg: dict[str, object]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        try:
            os.write(proc.stdin.fileno(), json.dumps(msg).encode() + b"\n")
        except BlockingIOError:  # a guard that stopped reading must not stop the agent
            print("cryopg agent: the job guard is not reading; a message was dropped",
                  file=sys.stderr)
        except OSError:  # it died: _ensure starts another and tells it again
            self._proc = None

    def send(self, msg: dict[str, object]) -> None:
        key = str(msg["key"])
        if msg["op"] == "end":
            self._jobs.pop(key, None)
        elif msg["op"] == "renew":
            told = self._jobs.get(key)
            if told is not None:  # the last renewal is all a new guard needs
                self._jobs[key] = [m for m in told if m["op"] != "renew"] + [msg]
        else:
            self._jobs.setdefault(key, []).append(msg)
        if self._ensure():
            self._send_now(msg)

    def close(self) -> None:
        """The agent is stopping: EOF makes the guard kill what is left and exit."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


# One per agent process, shared by its agents (`cryopg agent --count N`).
_STATE: dict[str, object] = {}


def host_setup() -> tuple[Cgroups | None, Guard]:
    """This process's cgroups (None when the host gives none) and guard, found once."""
    if "guard" not in _STATE:
        cg = Cgroups.probe()
        if isinstance(cg, str):
            print(f"cryopg agent: jobs are killed by process group only: {cg}",
                  file=sys.stderr)
            _STATE["cgroups"] = None
        else:
            _STATE["cgroups"] = cg
        _STATE["guard"] = Guard()
    return _STATE["cgroups"], _STATE["guard"]  # type: ignore[return-value]


# -- one job's tree ------------------------------------------------------------------


class JobTree:
    """One job: its cgroup (if any), its process group, its directories, its claim's
    deadline, registered with the guard before any plaintext is written."""

    _keys = itertools.count(1)

    def __init__(self, dirs: list[str], deadline: float | None,
                 hosting: tuple[Cgroups | None, Guard] | None = None) -> None:
        self._cgroups, self._guard = hosting or host_setup()
        self.key = str(next(self._keys))
        self.cgroup: str | None = None
        if self._cgroups is not None:
            try:
                self.cgroup = self._cgroups.new()
            except OSError as e:
                print(f"cryopg agent: no cgroup for this job ({e}); killing by process "
                      "group only", file=sys.stderr)
        self.pgid: int | None = None
        self.deadline = deadline
        self._guard.send({"op": "job", "key": self.key, "cgroup": self.cgroup,
                          "dirs": dirs, "deadline": deadline})

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """Around the fork of the job's leader: it is born in the job's cgroup."""
        if self.cgroup is None or self._cgroups is None:
            yield
            return
        with self._cgroups.entered(self.cgroup):
            yield

    def started(self, pid: int) -> None:
        self.pgid = pid  # the leader starts its own session: its pid is the group's id
        self._guard.send({"op": "pgid", "key": self.key, "pgid": pid})

    def renew(self, deadline: float) -> None:
        """The claim was renewed: it now lapses at `deadline` (monotonic)."""
        self.deadline = deadline
        self._guard.send({"op": "renew", "key": self.key, "deadline": deadline})

    def lapsed(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def signal(self, sig: int) -> None:
        """Send `sig` to every process of the job's cgroup (kill() is what ends them)."""
        if self.cgroup is None:
            return
        with contextlib.suppress(OSError):
            with open(os.path.join(self.cgroup, "cgroup.procs")) as f:
                pids = [int(line) for line in f if line.strip()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL everything the job started: its cgroup, and its process group."""
        if self.cgroup is not None:
            kill(self.cgroup)
        if self.pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)

    def close(self) -> None:
        """After kill and the directories' removal: the guard forgets the job (and
        removes its cgroup once the killed processes are gone)."""
        if self.cgroup is not None and remove(self.cgroup):
            self.cgroup = None
        self._guard.send({"op": "end", "key": self.key})
