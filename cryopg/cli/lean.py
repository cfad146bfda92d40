"""json, socket and subprocess as the in-script verbs need them, without their imports.

`import json` and `import socket` each cost ~20 ms of a verb's start-up on a slow
machine (re, enum and the regexes they compile), subprocess more; their C halves
(_json, _socket, posix_spawn) cost nothing. An interpreter without them gets the
stdlib modules instead.
"""

import os

try:
    from _json import encode_basestring, encode_basestring_ascii, make_encoder, make_scanner
except ImportError:  # not CPython: the json module does it all
    make_encoder = make_scanner = None  # type: ignore[assignment]
try:
    from _socket import AF_UNIX, SOCK_STREAM
    from _socket import socket as Socket
except ImportError:
    from socket import AF_UNIX, SOCK_STREAM
    from socket import socket as Socket


def _refuse(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: object, *, compact: bool = False) -> str:
    """json.dumps(value), or with compact json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)."""
    try:
        if compact:
            encode = make_encoder({}, _refuse, encode_basestring, None, ":", ",", False, False,
                                  True)
        else:
            encode = make_encoder({}, _refuse, encode_basestring_ascii, None, ": ", ", ", False,
                                  False, True)
    except TypeError:  # no _json, or one whose signature changed: the json module
        import json

        if compact:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return json.dumps(value)
    return "".join(encode(value, 0))


_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Context:
    """The attributes _json's scanner reads from a json.JSONDecoder."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    def __init__(self, parse_constant: object) -> None:
        self.parse_constant = parse_constant


def loads(text: str | bytes, parse_constant: object = _CONSTANTS.__getitem__) -> object:
    """json.loads for UTF-8 text; any malformed input raises ValueError."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    try:
        scan = make_scanner(_Context(parse_constant))
    except (TypeError, AttributeError):  # as in dumps
        import json

        return json.loads(text, parse_constant=parse_constant)
    text = text.strip(" \t\n\r")  # the whitespace json allows around a value
    try:
        value, end = scan(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    except (ValueError, SystemError):
        # Past the first character _json builds a json.decoder.JSONDecodeError, which
        # needs the json package this module avoids importing: without it the scanner
        # fails with a SystemError. Either way the text is malformed JSON.
        raise ValueError("malformed JSON") from None
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


def unix_socket() -> Socket:
    return Socket(AF_UNIX, SOCK_STREAM)


def run_captured(command: list[str], env: dict[str, str],
                 echo_fd: int | None = None) -> tuple[bytes, int]:
    """subprocess.run(command, stdout=PIPE, env=env) -> (stdout, returncode): a negative
    code is a signal. With echo_fd, each chunk is also written there as it arrives, so
    a step's output reaches the log while it runs. Raises OSError (FileNotFoundError, …)
    when it cannot start."""
    if not hasattr(os, "posix_spawnp"):
        import subprocess

        done = subprocess.run(command, stdout=subprocess.PIPE, env=env)
        if echo_fd is not None:
            os.write(echo_fd, done.stdout)
        return done.stdout, done.returncode
    read_end, write_end = os.pipe()
    # As subprocess does: the signals Python ignores back to default, inherited fds closed.
    actions = [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds()]
    actions.append((os.POSIX_SPAWN_DUP2, write_end, 1))
    try:
        pid = os.posix_spawnp(command[0], command, env, file_actions=actions,
                              setsigdef=_ignored_signals())
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    chunks = []
    try:
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
            if echo_fd is not None:
                _write_all(echo_fd, chunk)
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    return b"".join(chunks), os.waitstatus_to_exitcode(status)


def shell_script(command: list[str], env: dict[str, str]) -> list[str] | None:
    """What a shell runs when exec says ENOEXEC (a script without a `#!` line): the file
    read by /bin/sh, as execvp and every POSIX shell do. None for a file that is not text
    (a NUL in its first line, as bash checks), which stays an exec format error."""
    path = command[0]
    if "/" not in path:  # found on the body's PATH, as posix_spawnp found it
        for folder in env.get("PATH", os.defpath).split(os.pathsep):
            candidate = os.path.join(folder or ".", path)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                path = candidate
                break
        else:
            return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return None
    if b"\0" in head.split(b"\n", 1)[0]:
        return None
    return ["/bin/sh", path, *command[1:]]


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _inherited_fds() -> list[int]:
    """Open descriptors above 2 that an exec would pass on."""
    fds = []
    try:
        names = os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd")
    except OSError:
        return []
    for name in names:
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                fds.append(fd)
        except OSError:
            pass  # the descriptor listdir itself used
    return fds


def _ignored_signals() -> tuple[int, ...]:
    try:
        import _signal as sig
    except ImportError:
        import signal as sig  # type: ignore[no-redef]
    return tuple(getattr(sig, n) for n in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(sig, n))
