"""The job guard: one small process per agent process that kills what a job started
when the agent can no longer do it itself.

The agent starts it once (agent/jobtree.py) with a pipe on its stdin and tells it, one
JSON line each, about every job: its cgroup (or process group), its private and scratch
directories, and when its claim lapses unless renewed. The guard acts in two cases:

- the pipe reaches EOF: the agent is gone (`kill -9`, a crash, an exit). Every job it
  held is killed (cgroup.kill takes descendants that setsid or double-forked away too)
  and the job's directories, which hold the decrypted input and the script, are removed.
- a job's claim lapses without a renewal (the agent is SIGSTOPped, or wedged): that job
  is killed and its directories removed, before the server can hand the run to anyone
  else, so no step body runs on after its claim.

It runs as `python -I -S agent/guard.py`: the standard library only, no site packages,
a few milliseconds to start. It sits in its own session, so a signal to the agent's
process group does not take it along.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import sys
import time

# How long to wait for a killed cgroup to empty before removing it, on the way out.
EMPTY_SECONDS = 5.0
# How often a killed cgroup that is not empty yet is tried again.
RETRY_SECONDS = 0.05


class _Job:
    __slots__ = ("cgroup", "pgid", "dirs", "deadline", "dead")

    def __init__(self, cgroup: str | None, dirs: list[str], deadline: float | None) -> None:
        self.cgroup = cgroup
        self.pgid: int | None = None
        self.dirs = dirs
        self.deadline = deadline
        self.dead = False  # killed for a lapse; only its cgroup is left to remove


def kill_cgroup(path: str) -> None:
    """SIGKILL every process in the cgroup, wherever it went in sessions and groups."""
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")
        return
    except FileNotFoundError:
        if not os.path.isdir(path):
            return
    except OSError:
        pass
    # A kernel before 5.14 has no cgroup.kill: kill what is listed until none is left.
    for _ in range(100):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            _kill(pid)


def remove_cgroup(path: str, seconds: float = 0.0) -> bool:
    """rmdir once its killed processes have gone (EBUSY until then), trying for up to
    `seconds`."""
    until = time.monotonic() + seconds
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= until:
                return False
            time.sleep(0.01)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _kill_group(pgid: int | None) -> None:
    if pgid:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def _end(job: _Job, remove: bool) -> None:
    if job.cgroup:
        kill_cgroup(job.cgroup)
    _kill_group(job.pgid)
    for d in job.dirs:
        shutil.rmtree(d, ignore_errors=True)
    job.dirs = []
    if remove and job.cgroup and remove_cgroup(job.cgroup):
        job.cgroup = None


def main() -> int:
    # The agent's terminal signals are not ours: only EOF on stdin ends the guard.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    jobs: dict[str, _Job] = {}
    fd = sys.stdin.fileno()
    buf = b""
    while True:
        now = time.monotonic()
        due = [j.deadline for j in jobs.values() if j.deadline is not None and not j.dead]
        if any(j.dead and j.cgroup for j in jobs.values()):
            due.append(now + RETRY_SECONDS)
        timeout = max(0.0, min(due) - now) if due else None
        ready, _, _ = select.select([fd], [], [], timeout)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    _apply(jobs, json.loads(line))
        now = time.monotonic()
        for key, job in list(jobs.items()):
            if not job.dead and job.deadline is not None and now >= job.deadline:
                _end(job, remove=False)
                job.dead = True
                print(f"cryopg guard: job {key}: claim not renewed in time; killed it",
                      file=sys.stderr, flush=True)
            elif job.dead and job.cgroup and remove_cgroup(job.cgroup):
                job.cgroup = None
            if job.dead and job.cgroup is None and job.deadline is None:
                del jobs[key]
    # The agent is gone: nothing it started may outlive it, nor its plaintext.
    for job in jobs.values():
        _end(job, remove=False)
    for job in jobs.values():
        if job.cgroup:
            remove_cgroup(job.cgroup, EMPTY_SECONDS)
    return 0


def _apply(jobs: dict[str, _Job], msg: dict[str, object]) -> None:
    op, key = msg.get("op"), str(msg.get("key"))
    if op == "job":
        cgroup = msg.get("cgroup")
        dirs = msg.get("dirs") or []
        deadline = msg.get("deadline")
        jobs[key] = _Job(str(cgroup) if cgroup else None, [str(d) for d in dirs],  # type: ignore[union-attr]
                         float(deadline) if isinstance(deadline, int | float) else None)
        return
    job = jobs.get(key)
    if job is None:
        return
    if op == "pgid":
        pgid = msg.get("pgid")
        job.pgid = int(pgid) if isinstance(pgid, int) else None
    elif op == "renew":
        deadline = msg.get("deadline")
        if not job.dead and isinstance(deadline, int | float):
            job.deadline = float(deadline)
    elif op == "end":
        # The agent killed the tree and removed the directories itself; the cgroup goes
        # once empty. A job killed for a lapse ends the same way.
        job.dirs = []
        if job.cgroup and remove_cgroup(job.cgroup):
            job.cgroup = None
        if job.cgroup is None:
            del jobs[key]
        else:
            job.dead, job.deadline = True, None


if __name__ == "__main__":
    sys.exit(main())
