"""Confining a job: bubblewrap gives it its own PID, mount, network, IPC and UTS
namespaces and a file system made of read-only system directories plus its own two
directories; a root agent also runs it as another OS user (nobody by default).

What an isolated job therefore cannot reach: the agent's environment, memory and
command line (no /proc of the agent in its PID namespace), any `.cryopg/` directory, the
master key, other jobs' directories, the database's socket and any network (only its
own loopback), and no writable path outside its scratch and private directories.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# System directories every job sees read-only; links (merged /usr) stay links.
SYSTEM_DIRS = ("/usr", "/etc", "/opt")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The checkout's parts a job needs: the `cryopg` verbs, the SDKs, the toolchain driver.
CHECKOUT_PARTS = ("cryopg", "agent", "sdks")
USER_ENV = "CRYOPG_SANDBOX_USER"
OFF_ENV = "CRYOPG_SANDBOX"  # "off": this host cannot confine jobs (e.g. no user namespaces)
BIND_ENV = "CRYOPG_SANDBOX_BIND"
PROBE_SECONDS = 20.0


@dataclass(frozen=True)
class Sandbox:
    bwrap: str
    uid: int | None  # the job's OS user when the agent is root; None keeps the agent's
    gid: int | None
    user: str
    readonly: tuple[str, ...] = field(default=())

    def own(self, *paths: str) -> None:
        """Hand the job's own files and directories to its user (root agents only)."""
        if self.uid is None:
            return
        for top in paths:
            os.chown(top, self.uid, self.gid or -1, follow_symlinks=False)
            if os.path.isdir(top) and not os.path.islink(top):
                for name in os.listdir(top):
                    os.chown(os.path.join(top, name), self.uid, self.gid or -1,
                             follow_symlinks=False)

    def command(self, argv: list[str], *, writable: list[str], cwd: str) -> list[str]:
        """`argv` wrapped so it runs confined, seeing `writable` read-write at their own
        paths and starting in `cwd`."""
        # A root agent's bwrap mounts as root (so it can bind what only root reads, like
        # a Python under /root) and setpriv then drops to the job's user with no
        # capabilities; any other agent's bwrap runs in a user namespace of its own.
        userns = ["--unshare-user", "--disable-userns"] if self.uid is None else []
        args = [self.bwrap, *userns, "--unshare-pid", "--unshare-net", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session",
                "--hostname", "cryo-job",
                # First, so what is bound below stays visible when it lives under /tmp
                # (a checkout cloned there, say); /tmp is everyone's, as on any host.
                "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
        for link in SYSTEM_LINKS:
            if os.path.islink(link):
                args += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link):
                args += ["--ro-bind", link, link]
        # Directories bwrap makes for a mount point are root's and 0700; the job's user
        # must pass through them.
        for parent in sorted({str(a) for p in self.readonly for a in Path(p).parents} - {"/"}):
            args += ["--perms", "0755", "--dir", parent]
        for path in self.readonly:
            args += ["--ro-bind", path, path]
        for path in writable:
            args += ["--bind", path, path]
        args += ["--chdir", cwd, "--"]
        if self.uid is not None:
            args += ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        return args + argv

    def env(self, env: dict[str, str], home: str) -> dict[str, str]:
        """The job's environment inside: its home is its scratch directory."""
        out = dict(env)
        out.update(HOME=home, TMPDIR="/tmp", USER=self.user, LOGNAME=self.user)
        return out


def probe() -> Sandbox | str:
    """A working sandbox for this agent, or why there is none."""
    if (os.environ.get(OFF_ENV) or "").strip().lower() == "off":
        return f"{OFF_ENV}=off"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    uid = gid = None
    user = pwd.getpwuid(os.getuid()).pw_name if _has_user(os.getuid()) else str(os.getuid())
    if os.geteuid() == 0:
        name = os.environ.get(USER_ENV) or "nobody"
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            return f"the sandbox user {name!r} does not exist (set {USER_ENV})"
        if entry.pw_uid == 0:
            return f"the sandbox user {name!r} is root"
        uid, gid, user = entry.pw_uid, entry.pw_gid, name
    box = Sandbox(bwrap, uid, gid, user, _readonly_paths())
    scratch = Path(_private_parent()) / f"cryo-{os.getpid()}-probe"
    try:
        scratch.mkdir(mode=0o700, exist_ok=True)
        box.own(str(scratch))
        argv = box.command([sys.executable, "-S", "-c", "pass"], writable=[str(scratch)],
                           cwd=str(scratch))
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_SECONDS)
    except (OSError, subprocess.SubprocessError) as e:
        return f"bubblewrap could not start ({e})"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap failed: {why[-1] if why else f'exit {done.returncode}'}"
    return box


def _has_user(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def _readonly_paths() -> tuple[str, ...]:
    """System directories, this Python, the checkout's code (never the checkout itself,
    which may hold `.cryopg/`) and what the operator adds in CRYOPG_SANDBOX_BIND."""
    paths = [p for p in SYSTEM_DIRS if os.path.isdir(p)]
    for prefix in {sys.base_prefix, sys.prefix}:
        paths.append(os.path.realpath(prefix))
    checkout = Path(__file__).resolve().parent.parent
    paths += [str(checkout / p) for p in CHECKOUT_PARTS if (checkout / p).is_dir()]
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    paths.append(os.path.dirname(venv_bin))
    for extra in (os.environ.get(BIND_ENV) or "").split(":"):
        if extra and os.path.isabs(extra) and os.path.exists(extra):
            paths.append(os.path.realpath(extra))
    kept: list[str] = []
    for p in sorted(set(paths), key=len):  # a path inside one already bound adds nothing
        if ".cryopg" in Path(p).parts:
            continue
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return tuple(kept)


def _private_parent() -> str:
    return "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else "/tmp"
