"""A private PostgreSQL cluster built from the machine's own server binaries.

Used by `cryopg dev` (under `.cryopg/`) and by the test session. Data lives in
`base/pgdata`, the unix socket in `base/run`, the server log in `base/postgres.log`.
The cluster never listens on TCP, and trusts local socket connections as user `cryopg`.

PostgreSQL refuses to run as root, so when we are root every initdb/pg_ctl runs as the
`postgres` OS user through `runuser`, and the directories it writes are handed to it.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

PG_OS_USER = "postgres"
DB_USER = "cryopg"


class ClusterError(RuntimeError):
    """The private cluster cannot be found, created, started or stopped."""


def find_bindir() -> Path:
    """Directory holding initdb/pg_ctl: pg_config's, else the newest Debian one, else PATH."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True
            ).stdout.strip()
            candidates.append(Path(out))
        except (OSError, subprocess.CalledProcessError):
            pass

    # Debian's pg_config comes with libpq-dev and may point at a version without a server.
    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.name)) or (0,)

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for c in candidates:
        if (c / "initdb").is_file() and (c / "pg_ctl").is_file():
            return c
    raise ClusterError(
        "no PostgreSQL server binaries found (initdb/pg_ctl); install the postgresql "
        "package (scripts/setup does it) or pass --database-url"
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    comm = Path(f"/proc/{pid}/comm")
    if comm.exists():  # guard against a recycled pid after an unclean shutdown
        try:
            return comm.read_text().strip().startswith("postgres")
        except OSError:
            return True
    return True


def _conninfo_value(v: str) -> str:
    # libpq conninfo quoting: a base dir may contain spaces or quotes.
    if v and not re.search(r"[\s'\\]", v):
        return v
    return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _can_traverse(path: Path, uid: int, gids: set[int]) -> bool:
    st = path.stat()
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


class Cluster:
    def __init__(self, base: Path, port: int = 5439, options: Sequence[str] = ()) -> None:
        """`options` are extra server settings, e.g. ["fsync=off"] (only ever for tests)."""
        self.base = Path(base).resolve()
        self.port = port
        self.options = list(options)
        self.pgdata = self.base / "pgdata"
        self.sockdir = self.base / "run"
        self.logfile = self.base / "postgres.log"
        self._bindir: Path | None = None
        self._as_root = os.geteuid() == 0

    # -- helpers ---------------------------------------------------------------------

    @property
    def bindir(self) -> Path:
        if self._bindir is None:
            self._bindir = find_bindir()
        return self._bindir

    def _pg_user(self) -> pwd.struct_passwd:
        try:
            return pwd.getpwnam(PG_OS_USER)
        except KeyError:
            raise ClusterError(
                f"running as root needs the '{PG_OS_USER}' OS user (PostgreSQL refuses root); "
                "install the postgresql package or run as a normal user"
            ) from None

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / tool), *args]
        if self._as_root:
            cmd = ["runuser", "-u", PG_OS_USER, "--", *cmd]
        # cwd=base: postgres may not be able to enter our cwd (e.g. /root), which it notes.
        proc = subprocess.run(
            cmd, cwd=self.base, capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise ClusterError(
                f"{tool} failed ({proc.returncode}): {' | '.join(detail)}{self._log_tail()}"
            )
        return proc

    def _log_tail(self) -> str:
        try:
            lines = self.logfile.read_text(errors="replace").strip().splitlines()[-5:]
        except OSError:
            return ""
        return ("\n  log " + str(self.logfile) + ":\n    " + "\n    ".join(lines)) if lines else ""

    def _prepare_dirs(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        self.sockdir.mkdir(mode=0o700, exist_ok=True)
        # The cluster trusts whoever reaches its socket, so only its own OS user (and root)
        # may: an older cluster's directory is closed here too.
        self.sockdir.chmod(0o700)
        self.logfile.touch(exist_ok=True)
        if not self._as_root:
            return
        pg = self._pg_user()
        gids = set(os.getgrouplist(pg.pw_name, pg.pw_gid))
        for d in [*reversed(self.base.parents), self.base]:
            if not _can_traverse(d, pg.pw_uid, gids):
                raise ClusterError(
                    f"the '{PG_OS_USER}' OS user cannot enter {d}; open it with "
                    f"`chmod o+x {shlex.quote(str(d))}` or put the cluster elsewhere"
                )
        # The log is opened by pg_ctl as postgres, and base itself stays ours.
        for p in (self.pgdata, self.sockdir, self.logfile):
            st = p.stat()
            if st.st_uid != pg.pw_uid:
                os.chown(p, pg.pw_uid, pg.pw_gid)

    def _pidfile_lines(self) -> list[str]:
        try:
            return (self.pgdata / "postmaster.pid").read_text().splitlines()
        except OSError:
            return []

    # -- public API ------------------------------------------------------------------

    def is_initialized(self) -> bool:
        return (self.pgdata / "PG_VERSION").is_file()

    def ensure_initialized(self) -> None:
        """Run initdb once; an existing cluster is kept as is."""
        self._prepare_dirs()
        if self.is_initialized():
            return
        # Locale C works with UTF8 whatever locales the machine has generated.
        args = ["-D", str(self.pgdata), "-A", "trust", "-U", DB_USER, "-E", "UTF8"]
        args.append("--locale=C")
        if "fsync=off" in self.options:
            args.append("--no-sync")
        self._run("initdb", *args)

    def is_running(self) -> bool:
        lines = self._pidfile_lines()
        return bool(lines) and lines[0].strip().isdigit() and _pid_alive(int(lines[0]))

    def start(self) -> None:
        """Start the server (initialising first if needed); reuse one already running."""
        self.ensure_initialized()
        if self.is_running():
            lines = self._pidfile_lines()
            if len(lines) > 3 and lines[3].strip() != str(self.port):
                raise ClusterError(
                    f"cluster in {self.pgdata} is already running on port {lines[3].strip()}, "
                    f"not {self.port}; stop it first"
                )
            return
        sock = self.sockdir / f".s.PGSQL.{self.port}"
        if len(str(sock).encode()) > 107:  # sockaddr_un.sun_path limit
            raise ClusterError(f"socket path too long ({sock}); use a shorter directory")
        opts = ["-k", str(self.sockdir), "-p", str(self.port), "-c", "listen_addresses=",
                "-c", "unix_socket_permissions=0700"]
        for o in self.options:
            opts += ["-c", o]
        log = str(self.logfile)
        self._run(
            "pg_ctl", "start", "-w", "-D", str(self.pgdata), "-l", log, "-o", shlex.join(opts)
        )

    def stop(self) -> None:
        """Fast shutdown (rolls back open transactions); a stopped cluster is left alone."""
        if not self.is_initialized() or not self.is_running():
            return
        self._run("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.pgdata))

    def dsn(self, dbname: str = DB_USER) -> str:
        """libpq conninfo for a database of this cluster."""
        parts = {"host": self.sockdir, "port": self.port, "user": DB_USER, "dbname": dbname}
        return " ".join(f"{k}={_conninfo_value(str(v))}" for k, v in parts.items())

    def create_database(self, name: str) -> bool:
        """Create database `name` unless it exists; True when it was created."""
        import psycopg  # lazy: devpg is imported by the CLI, which keeps startup light
        from psycopg import sql

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            if conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
                return False
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
            return True
