"""Run a script under a pseudo-terminal without blocking the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import shlex
import shutil
import signal
import struct
import subprocess
import termios
from collections.abc import Callable

from agent import toolchains
from agent.jobtree import JobTree


def script_command(
    filename: str, interpreter: str | None, script_path: str, search_path: str | None
) -> list[str]:
    """argv that runs `script_path`: the grant's interpreter, else one chosen by extension."""
    if interpreter and interpreter.strip():
        return [*shlex.split(interpreter), script_path]
    ext = os.path.splitext(filename)[1].lower()
    if ext == ".py":
        return ["python3", script_path]
    if ext in (".js", ".mjs", ".cjs"):
        return ["node", script_path]
    if toolchains.handles(filename):  # .ts, .go, .rs: found SDK, built, then exec'd
        return toolchains.command(script_path)
    # errexit and nounset, as the spec's bash recipes expect: a failing command ends
    # the run (write `cmd || rc=$?` to carry on past one).
    return ["bash", "-eu", script_path]


def exit_status(returncode: int) -> int:
    """Shell convention: a death by signal N reads as 128+N."""
    return 128 - returncode if returncode < 0 else returncode


class PtyProcess:
    """A child in its own session whose stdio is a PTY; output arrives via `on_output`."""

    def __init__(
        self,
        proc: _Child,
        master_fd: int,
        on_output: Callable[[bytes], None],
        tree: JobTree | None = None,
    ) -> None:
        self._proc = proc
        self._tree = tree
        self._master = master_fd
        self._on_output = on_output
        self._loop = asyncio.get_running_loop()
        self._closed = asyncio.Event()  # the slave side is gone everywhere (EIO)
        self._reading = False
        self.resume_reading()

    @classmethod
    async def spawn(
        cls,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        on_output: Callable[[bytes], None],
        tree: JobTree | None = None,
    ) -> PtyProcess:
        """With `tree`, the child is born in the job's cgroup and its process group is
        told to the guard (agent/jobtree.py)."""
        master, slave = os.openpty()
        try:
            _configure_tty(slave)
            executable = _resolved(argv[0], env.get("PATH"))
            with tree.spawning() if tree is not None else contextlib.nullcontext():
                popen = subprocess.Popen(
                    argv,
                    executable=executable,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                )
            if tree is not None:
                tree.started(popen.pid)
            proc = _Child(popen)
        except BaseException:
            os.close(master)
            raise
        finally:
            # Only the child may hold the slave, so its exit shows up as EIO on the master.
            os.close(slave)
        os.set_blocking(master, False)
        return cls(proc, master, on_output, tree)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def pause_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._master)
            self._reading = False

    def resume_reading(self) -> None:
        if not self._reading and not self._closed.is_set():
            self._loop.add_reader(self._master, self._on_readable)
            self._reading = True

    def _on_readable(self) -> None:
        try:
            data = os.read(self._master, 65536)
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno != errno.EIO:
                raise
            data = b""
        if data:
            self._on_output(data)
        else:
            self.pause_reading()
            self._closed.set()

    def read_pending(self) -> None:
        """Feed whatever the PTY holds right now. The script is blocked on a verb reply, so
        everything it printed before the call is already here, even if the loop has not
        woken for it yet."""
        if self._closed.is_set():
            return
        while True:
            try:
                data = os.read(self._master, 65536)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            self._on_output(data)

    def terminate(self) -> None:
        """SIGTERM the script's process group and every process of its cgroup (a body
        may trap it and clean up); kill() follows after a grace."""
        if self._tree is not None:
            self._tree.signal(signal.SIGTERM)
        try:
            os.killpg(self._proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        """SIGKILL the script and everything it started: its cgroup when it has one
        (descendants that left with setsid too), and its process group."""
        if self._tree is not None:
            self._tree.kill()
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    async def wait(self) -> int:
        return exit_status(await self._proc.wait())

    async def drain(self, timeout: float) -> None:
        """After exit: read what is still buffered in the PTY, until EIO or `timeout`."""
        if self._closed.is_set():  # EIO came already: everything was read
            return
        self.resume_reading()
        try:
            await asyncio.wait_for(self._closed.wait(), timeout)
        except TimeoutError:
            pass

    def close(self) -> None:
        close_fd(self.release_fd())

    def release_fd(self) -> int:
        """Stops reading and hands the PTY's master over; the caller closes it (see
        close_fd), which need not happen on the event loop."""
        self.pause_reading()
        self._closed.set()
        return self._master


def _resolved(program: str, search_path: str | None) -> str:
    """The program's path as the child's PATH finds it, looked up once per agent: a bare
    name made the child try execve in each PATH entry before the right one, every run.
    A name not found stays bare, so Popen reports it as before."""
    if os.sep in program:
        return program
    key = (program, search_path)
    found = _FOUND.get(key)
    if found is None or not os.access(found, os.X_OK):
        found = shutil.which(program, path=search_path if search_path is not None
                             else os.defpath) or program
        if len(_FOUND) > 256:
            _FOUND.clear()
        _FOUND[key] = found
    return found


_FOUND: dict[tuple[str, str | None], str] = {}


def close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class _Child:
    """A started process whose exit the event loop learns from a pidfd: no thread per
    child (asyncio's default watcher starts one for every process), and nothing else
    to wake. Where pidfds are missing (Linux before 5.3), a thread waits instead."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        loop = asyncio.get_running_loop()
        self._exit: asyncio.Future[int] = loop.create_future()
        try:
            self._pidfd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):
            self._pidfd = -1
            waiter = loop.run_in_executor(None, popen.wait)
            waiter.add_done_callback(lambda f: self._settle(f.result()))
        else:
            loop.add_reader(self._pidfd, self._reap)

    def _reap(self) -> None:
        asyncio.get_running_loop().remove_reader(self._pidfd)
        os.close(self._pidfd)
        _, status = os.waitpid(self.pid, 0)
        self._popen.returncode = os.waitstatus_to_exitcode(status)
        self._settle(self._popen.returncode)

    def _settle(self, returncode: int) -> None:
        if not self._exit.done():
            self._exit.set_result(returncode)

    async def wait(self) -> int:
        """The return code, negative for a death by signal (as Popen has it)."""
        return await asyncio.shield(self._exit)


def _configure_tty(fd: int) -> None:
    # No "\n" -> "\r\n" translation, so logs hold exactly the bytes the script wrote.
    attrs = termios.tcgetattr(fd)
    attrs[1] &= ~termios.ONLCR
    termios.tcsetattr(fd, termios.TCSANOW, attrs)
    # Some tools misbehave on a 0x0 terminal.
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
