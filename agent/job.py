"""One claim, start to end: scratch dir, sealed env, PTY process, socket, logs, outcome."""

from __future__ import annotations

import asyncio
import base64
import enum
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from agent.api import AgentAPI, AgentAPIError, RunTimedOut, StaleClaim, retry_until
from agent.env import sealed_env
from agent.jobtree import JobTree, alive, job_prefix
from agent.logs import HEARTBEAT_INTERVAL, LogStreamer
from agent.runner import PtyProcess, close_fd, script_command
from agent.sandbox import Sandbox
from agent.socket_server import DurableVerbs
from cryopg import tracing

# How long to keep reading the PTY after the script exits (a grandchild may hold it).
DRAIN_SECONDS = 1.0
# How long a call the script made just before exiting may take to be recorded.
SETTLE_SECONDS = 35.0
# How long a stopping agent waits to hand its run back.
RELEASE_SECONDS = 3.0
# How long a timed-out job has between SIGTERM and SIGKILL (CRYOPG_KILL_GRACE overrides).
KILL_GRACE_SECONDS = 5.0


def lapse_margin(claim_seconds: float) -> float:
    """How much sooner than the server's expiry the job's guard kills it: the server
    counts a claim from when it renewed it, a little after the agent's request left."""
    return min(1.0, claim_seconds / 10)


class End(enum.Enum):
    """Why a pass ended early; None on the job means the script exited by itself."""

    PARKED = "parked"  # the server holds the run now; no finish call
    STALE = "stale"  # the claim was lost; drop the run
    STOPPED = "stopped"  # the agent is shutting down; the run is handed back
    CANCELLED = "cancelled"  # the server asked for it via a logs reply
    DIVERGED = "diverged"  # determinism error: fail the run
    TIMED_OUT = "timed_out"  # the database failed the run at its deadline; no finish call


class Job:
    def __init__(
        self,
        api: AgentAPI,
        grant: dict[str, Any],
        *,
        strict: bool,
        stop: asyncio.Event,
        agent_token: str | None = None,
        local: bool = False,
        claim_next: dict[str, Any] | None = None,
        sandbox: Sandbox | None = None,
        isolate_all: bool = False,
        drain: asyncio.Event | None = None,
    ) -> None:
        self.api = api
        # What the finish asks for next (see AgentAPI.finish), and the grant it got.
        self._claim_next = claim_next
        self.next_grant: dict[str, Any] | None = None
        self.grant = grant
        self.traceparent: str | None = None  # this pass's span, when tracing is on
        self.run_id: str = grant["run_id"]
        self.claim_token: str = grant["claim_token"]
        self._strict = strict
        self._stop = stop
        self._drain = drain
        self._agent_token = agent_token
        self._local = local
        # Untrusted runs are confined; so is every run of an agent told to isolate all.
        self._untrusted = bool(grant.get("untrusted"))
        self._sandbox = sandbox if (self._untrusted or isolate_all) else None
        self._end: End | None = None
        self._error: str | None = None
        self._exited = False  # the script's process has exited (its group is killed next)
        self._proc: PtyProcess | None = None
        self._last_output = b""  # what the finish request carries
        # The files _run_in puts in the job's private directory (removed by name).
        self._private_files: tuple[str, ...] = ()
        claim_seconds = float(grant.get("claim_seconds") or 30)
        # When the claim lapses unless renewed (monotonic), what the job's guard kills
        # it at; counted from when each renewal was sent, and from now for the grant.
        self._claim_seconds = claim_seconds
        self._lapse_at = time.monotonic() + claim_seconds - lapse_margin(claim_seconds)
        self._tree: JobTree | None = None
        self._logs = LogStreamer(
            _Renewing(api, self._renewed),
            self.run_id,
            self.claim_token,
            heartbeat=min(HEARTBEAT_INTERVAL, max(claim_seconds / 3, 0.2)),
            on_cancel=lambda: self._finish_early(End.CANCELLED),
            on_stale=self.stale,
            on_pressure=self._pressure,
            secrets=list((grant.get("secrets") or {}).values()),
            claim_seconds=claim_seconds,
            context=base64.b64decode(grant.get("log_context") or ""),
        )
        self.secret_names: frozenset[str] = frozenset(grant.get("secrets") or {})
        self.withheld: frozenset[str] = frozenset(grant.get("withheld") or [])

    # -- hooks used by the socket server and the log streamer --------------------------

    async def flush_logs(self) -> None:
        # Called as the pass parks: nothing more of it will be printed.
        if self._proc is not None:
            self._proc.read_pending()
        await self._logs.flush(final=True)

    def mask(self, text: str) -> str:
        """`text` with the run's secret values masked (a step name, label or note)."""
        return self._logs.names.text(text)

    def parked(self) -> None:
        self._finish_early(End.PARKED)

    def stale(self, why: BaseException | None = None) -> None:
        """The claim is gone. When the database failed the run at its deadline
        (RunTimedOut) the job's tree gets SIGTERM, and SIGKILL after a grace."""
        if isinstance(why, RunTimedOut):
            self._time_out()
        else:
            self._finish_early(End.STALE)

    def _time_out(self) -> None:
        if self._end is not None:
            return
        self._end = End.TIMED_OUT
        if self._proc is not None:
            grace = kill_grace()
            if self._tree is not None:
                # No agent can be given the run again, so the guard's lapse kill (which
                # guards against that) waits out the grace too.
                self._tree.renew(time.monotonic() + grace + 1.0)
            self._proc.terminate()
            asyncio.get_running_loop().call_later(grace, self._proc.kill)

    def diverged(self, message: str) -> None:
        """Fail the run now: a determinism error, or a step that needs a secret the run
        does not get."""
        if self._finish_early(End.DIVERGED):
            self._error = message
            self._logs.feed(f"\ncryopg: {message}\n".encode())

    def ending(self) -> bool:
        return self._end is not None

    def script_exited(self) -> bool:
        return self._exited

    def claim_deadline(self) -> float:
        return self._logs.claim_deadline()

    def _finish_early(self, why: End) -> bool:
        if self._end is not None:
            return False
        self._end = why
        if self._proc is not None:
            self._proc.kill()
        return True

    def _renewed(self, sent_at: float) -> None:
        """A log post sent at `sent_at` renewed the claim."""
        at = sent_at + self._claim_seconds - lapse_margin(self._claim_seconds)
        if at > self._lapse_at:
            self._lapse_at = at
            if self._tree is not None:
                self._tree.renew(at)

    def _pressure(self, high: bool) -> None:
        if self._proc is not None:
            if high:
                self._proc.pause_reading()
            else:
                self._proc.resume_reading()

    # -- the claim --------------------------------------------------------------------

    async def run(self) -> None:
        retry_until(self.claim_deadline)  # reporting the outcome waits out an outage too
        if self._untrusted and self._sandbox is None:
            # Only agents advertising `isolated` are given untrusted runs; never run one
            # unconfined, hand it back for one that can.
            _log(f"run {self.run_id}: untrusted, and this agent cannot confine it")
            await release(self.api, self.run_id, self.claim_token)
            return
        # The agent's own files for the pass (the script's pinned copy, its input, the
        # verb socket) go to a memory file system when there is one: creating and
        # removing them on a disk shared with the database's WAL flushes is what a short
        # job's agent spent most of its time on. The script's working directory (a
        # deployed agent's fresh scratch directory) stays where TMPDIR says.
        private = _new_dir(_memory_dir() or tempfile.gettempdir())
        confined = self._sandbox is not None
        scratch = private if (self._local and not confined) or _memory_dir() is None else \
            _new_dir(tempfile.gettempdir())
        # Before any plaintext is written: the guard knows the directories to remove and
        # the tree to kill if this agent dies or its claim lapses while it cannot act.
        self._tree = tree = JobTree(sorted({private, scratch}), self._lapse_at)
        try:
            # This pass is a span of the run's trace (the grant's traceparent is its claim)
            with tracing.span("cryopg pass", self.grant.get("traceparent"), run_id=self.run_id,
                              attempt=self.grant.get("attempt")) as pass_span:
                self.traceparent = tracing.traceparent_of(pass_span)
                await self._run_in(private, scratch)
        except Exception as e:  # a bug or a local failure must not take the agent down
            _log(f"run {self.run_id}: agent error: {type(e).__name__}: {e}")
            if self._end is None:
                await self._finish("failed", None, f"agent error: {type(e).__name__}: {e}")
        finally:
            fd = None
            tree.kill()
            if self._proc is not None:
                self._proc.kill()
                fd = self._proc.release_fd()
            # The PTY and the memory directory go here and now (some 50 us; a worker
            # thread's wake-up and GIL hand-off cost a short job more than that). So
            # does a scratch directory the script left empty (one rmdir); one holding
            # files waits on the disk's journal (shared with the database's flushes):
            # a worker thread removes it while the next job starts.
            _clean_up(fd, [private], self._private_files)
            if scratch != private and not _remove_empty(scratch):
                asyncio.get_running_loop().run_in_executor(None, _clean_up, None, [scratch])
            tree.close()
            self._forget_secrets()

    def _forget_secrets(self) -> None:
        """Drop the grant's plaintext secrets; the rest of the job (its log streamer
        among it) goes when the claim loop lets go of it."""
        self.grant.pop("secrets", None)

    async def _run_in(self, private: str, scratch: str) -> None:
        g = self.grant
        filename = os.path.basename(str(g.get("filename") or "")) or "script"
        script_path = os.path.join(private, filename)
        with _private_file(script_path, 0o700) as f:
            f.write(g.get("source") or "")
        input_path = os.path.join(private, "input.json")
        with _private_file(input_path, 0o600) as f:
            json.dump(g.get("input"), f)
        socket_path = os.path.join(private, "cryo.sock")
        self._private_files = (filename, "input.json", "cryo.sock")
        env = sealed_env(
            os.environ,
            run_id=self.run_id,
            attempt=g.get("attempt") or 1,
            socket_path=socket_path,
            input_file=input_path,
            agent_token=self._agent_token,
            secrets=g.get("secrets") or {},
        )
        if self.traceparent:  # the script's own spans join the run's trace
            env["TRACEPARENT"] = self.traceparent
        argv = script_command(filename, g.get("interpreter"), script_path, env.get("PATH"))
        cwd = self._workdir(scratch)

        verbs = DurableVerbs(self, list(g.get("journal") or []), strict=self._strict)
        server = await verbs.start(socket_path)
        if self._sandbox is not None:
            box = self._sandbox
            box.own(private, *([scratch] if scratch != private else []))
            argv = box.command(argv, writable=sorted({private, scratch}), cwd=cwd)
            env = box.env(env, home=scratch)
        ticker: asyncio.Task[None] | None = None
        try:
            try:
                self._proc = await PtyProcess.spawn(
                    argv, cwd=cwd, env=env, on_output=self._logs.feed, tree=self._tree
                )
            except OSError as e:
                message = f"cannot start {argv[0]}: {e.strerror or e}"
                self._logs.feed(f"cryopg: {message}\n".encode())
                code = 127 if isinstance(e, FileNotFoundError) else 126
                await self._conclude(code, message)
                return
            ticker = asyncio.create_task(self._logs.run())
            exited = asyncio.create_task(self._proc.wait())
            stopping = asyncio.create_task(self._stop.wait())
            try:
                await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
            if not exited.done():
                self._finish_early(End.STOPPED)
            code = await exited
            self._exited = True
            self._proc.kill()  # whatever the script left running, in its cgroup or group
            if self._end is None and self._tree is not None and self._tree.lapsed():
                # The guard may have killed it: the claim lapsed unrenewed (this agent
                # was stopped, say), and the run may be someone else's by now.
                self._finish_early(End.STALE)
            if self._end is None:
                await verbs.settle(SETTLE_SECONDS)  # e.g. a park racing a natural exit
            await self._proc.drain(DRAIN_SECONDS)
            await self._logs.stop(ticker)
            await self._conclude(code, None)
        finally:
            verbs.cancel_all()
            if ticker is not None:
                await _cancel(ticker)
            server.close()

    def _workdir(self, scratch: str) -> str:
        """Where the script runs: a local agent runs it in the directory it was submitted
        from (relative paths, virtualenvs, node_modules resolve as by hand); the script
        itself, its input and the socket stay in the agent's private directory, so the
        source is the one pinned at submit time. Any other agent runs it in a fresh
        scratch directory."""
        wanted = self.grant.get("workdir")
        if not self._local or not wanted or self._sandbox is not None:
            return scratch
        if not os.path.isdir(wanted):
            self._logs.feed(f"cryopg: submitted from {wanted}, which this agent cannot "
                            "see; running in a scratch directory\n".encode())
            return scratch
        return str(wanted)

    async def _conclude(self, code: int, error: str | None) -> None:
        why = self._end
        if why is End.STOPPED:
            await release(self.api, self.run_id, self.claim_token)
            return
        if why in (End.PARKED, End.STALE, End.TIMED_OUT):
            return
        try:
            self._last_output = await self._logs.take_final()
        except StaleClaim:
            return
        except AgentAPIError as e:
            _log(f"run {self.run_id}: final log flush failed: {e.message}")
        if why is End.CANCELLED:
            await self._finish("cancelled", None, None)
        elif why is End.DIVERGED:
            await self._finish("failed", None, self._error)
        elif code == 0 and error is None:
            await self._finish("succeeded", 0, None)
        else:
            await self._finish("failed", code, error)

    async def _finish(self, outcome: str, exit_code: int | None, error: str | None) -> None:
        # An agent that is stopping or draining asks for nothing more.
        done = self._stop.is_set() or (self._drain is not None and self._drain.is_set())
        claim_next = None if done else self._claim_next
        try:
            self.next_grant = await self.api.finish(
                self.run_id,
                self.claim_token,
                outcome=outcome,
                exit_code=exit_code,
                error=error,
                data=self._last_output,
                offset=self._logs.final_offset,
                claim_next=claim_next,
            )
        except StaleClaim:
            pass  # someone else owns the run now; nothing to report
        except AgentAPIError as e:
            _log(f"run {self.run_id}: could not report {outcome}: {e.message}")


def kill_grace() -> float:
    """Seconds between a timed-out job's SIGTERM and its SIGKILL."""
    try:
        return max(0.0, float(os.environ.get("CRYOPG_KILL_GRACE", KILL_GRACE_SECONDS)))
    except ValueError:
        return KILL_GRACE_SECONDS


def job_dir_prefix() -> str:
    """Names a job's directories after the agent's process, so a later agent can tell
    which ones a dead agent left behind (sweep_job_dirs)."""
    return job_prefix()


def _new_dir(parent: str) -> str:
    """A new directory only the agent can enter, named job_dir_prefix() and 12 random
    hex digits (tempfile.mkdtemp's work, with less of its Python around one mkdir)."""
    while True:
        path = os.path.join(parent, job_dir_prefix() + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path


def sweep_job_dirs() -> int:
    """Remove the job directories of agents that are gone (killed before they could
    clean up: a script, its decrypted input, its scratch files). Returns how many."""
    removed = 0
    for parent in {_memory_dir() or tempfile.gettempdir(), tempfile.gettempdir()}:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            parts = name.split("-")
            if len(parts) < 3 or parts[0] != "cryo" or not parts[1].isdigit():
                continue
            if alive(int(parts[1])):
                continue
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
            removed += 1
    return removed


def _private_file(path: str, mode: int) -> Any:
    """A new file only its owner can read (the job's input is decrypted)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w",
                     encoding="utf-8")


def _clean_up(fd: int | None, dirs: list[str], known: tuple[str, ...] = ()) -> None:
    if fd is not None:
        close_fd(fd)
    for d in dirs:
        if not _remove_empty(d, known):
            shutil.rmtree(d, ignore_errors=True)


def _remove_empty(path: str, known: tuple[str, ...] = ()) -> bool:
    """Removes a directory that holds nothing but the `known` names (the files the
    agent put in a job's private directory) with a few unlinks and one rmdir instead of
    a tree walk. False when something else is in it: the caller walks it."""
    for name in known:
        try:
            os.unlink(os.path.join(path, name))
        except OSError:
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _memory_dir() -> str | None:
    """/dev/shm when it is a writable memory file system here, else None (TMPDIR)."""
    global _MEMORY_DIR
    if _MEMORY_DIR is None:
        ok = os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK)
        _MEMORY_DIR = "/dev/shm" if ok else ""
    return _MEMORY_DIR or None


_MEMORY_DIR: str | None = None


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass


class _Renewing:
    """The agent API as the log streamer sees it: a log post that succeeds renewed the
    claim, counted from when it was sent."""

    def __init__(self, api: AgentAPI, renewed: Any) -> None:
        self._api = api
        self._renewed = renewed

    async def logs(self, run_id: str, claim_token: str, data: bytes, **kw: Any) -> Any:
        sent_at = time.monotonic()
        cancel = await self._api.logs(run_id, claim_token, data, **kw)
        self._renewed(sent_at)
        return cancel

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


async def release(api: AgentAPI, run_id: str, claim_token: str) -> None:
    """Give the run back so it resumes now elsewhere; if this fails, its claim expires."""
    try:
        await api.release(run_id, claim_token, RELEASE_SECONDS)
    except AgentAPIError as e:
        _log(f"run {run_id}: not handed back ({e.message}); it resumes when its claim expires")


def _log(line: str) -> None:
    print(f"cryopg agent: {line}", file=sys.stderr)
