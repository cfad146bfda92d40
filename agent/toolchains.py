"""Run a workflow written in TypeScript, Go or Rust, finding this checkout's SDK.

`python -m agent.toolchains FILE [ARG...]` prepares what the language needs, then
execs the program in place, so its exit code and output are the run's. The agent starts
`.ts`, `.go` and `.rs` scripts this way (agent/runner.py), and a workflow can start a
child file of those languages the same way (an activity's argv).

- TypeScript: `bun run FILE` when bun is on PATH; otherwise node with the SDK's loader
  (sdks/typescript/loader), which erases types with the `typescript` package installed
  beside the SDK and resolves `@cryosleep/sdk` to this checkout's copy.
- Go: FILE is copied into a build directory keyed by its content, under the build cache,
  with a go.mod whose `replace cryosleep.io/go => sdks/go` makes the SDK importable;
  `go build` (Go's own cache makes a replay's rebuild quick), then exec. Building and
  exec'ing instead of `go run` keeps the program's exit code (go run reports any failure
  as 1).
- Rust: the same, as a cargo project with `cryosleep = { path = "sdks/rust" }`, built
  into one shared target directory so serde_json and the SDK compile once per machine.
  A file that uses serde (`#[derive(Serialize, Deserialize)]`, `use serde::…`) also gets
  `serde = { version = "1", features = ["derive"] }`, fetched by cargo on first use.

A cold build (a program not built before) says so in the run's log, adds a line every
BUILD_HEARTBEAT seconds and one when it is done (`cryopg: building …`, `cryopg: still
building …`, `cryopg: built …`), so a first Go or Rust workflow is not a silent
"running" for minutes; of the compiler's own output only its errors show.
`python -m agent.toolchains --warm` (scripts/setup runs it) builds a program of each
language once, so the SDKs and their dependencies are in the caches before the first
run; it builds nothing, and says nothing, when the stamp of the SDK sources and the
toolchain version says that was done.

The build cache is `$CRYO_BUILD_CACHE`, else `$XDG_CACHE_HOME/cryopg` or
`~/.cache/cryopg`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

SDKS = Path(__file__).resolve().parent.parent / "sdks"
EXTENSIONS = frozenset({".ts", ".mts", ".go", ".rs"})
# Seconds between "still building" lines of a cold build.
BUILD_HEARTBEAT = 15.0
# How much nicer than the agent a build runs (see _lower_priority).
BUILD_NICENESS = 10
# A Rust workflow that names serde (beyond serde_json) gets the crate with its derive.
_USES_SERDE = re.compile(rb"\bserde::|\buse\s+serde\b|derive\s*\([^)]*\b(Serialize|Deserialize)\b")


def handles(filename: str) -> bool:
    return os.path.splitext(filename)[1].lower() in EXTENSIONS


def command(script_path: str) -> list[str]:
    """The argv the agent runs for a script this module handles."""
    return [sys.executable, "-m", "agent.toolchains", script_path]


def build_cache() -> Path:
    explicit = os.environ.get("CRYO_BUILD_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cryopg"


def rust_target_dir() -> Path:
    return build_cache() / "rust-target"


def _fail(message: str, code: int = 127) -> int:
    print(f"cryopg: {message}", file=sys.stderr)
    return code


def _keyed_dir(kind: str, source: bytes) -> Path:
    digest = hashlib.sha256(source + str(SDKS).encode()).hexdigest()[:16]
    return build_cache() / kind / digest


def _write(path: Path, text: str | bytes) -> None:
    """Atomic, so two agents preparing one program never see half a file."""
    data = text.encode() if isinstance(text, str) else text
    if path.exists() and path.read_bytes() == data:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def typescript(path: Path) -> list[str] | int:
    if shutil.which("bun"):
        link = path.parent / "node_modules" / "@cryosleep" / "sdk"
        if not _resolvable(path.parent) and os.access(path.parent, os.W_OK):
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(SDKS / "typescript")
        return ["bun", "run", str(path)]
    if not shutil.which("node"):
        return _fail("a .ts workflow needs bun or node on PATH")
    sdk = SDKS / "typescript"
    if not (sdk / "node_modules" / "typescript").is_dir():
        return _fail(f"node needs the typescript package to run .ts: run `npm install` in {sdk}")
    return ["node", "--import", str(sdk / "loader" / "register.mjs"), str(path)]


def _resolvable(start: Path) -> bool:
    for d in [start, *start.parents]:
        if (d / "node_modules" / "@cryosleep" / "sdk").exists():
            return True
    return False


def _say(text: str) -> None:
    print(f"cryopg: {text}", file=sys.stderr, flush=True)


def _lower_priority() -> None:
    # A compiler takes every core it can get; at the agent's own priority a few cold
    # builds at once starve the agent (and a dev stack's server, in the same process) of
    # the CPU its claim renewals need, and a claim that lapses replays the run elsewhere.
    os.nice(BUILD_NICENESS)


def _build(argv: list[str], cwd: Path, what: str | None = None) -> int:
    """Run a build below the agent's CPU priority; its own output (errors) goes to the
    run's log like the program's. With `what` (a cold build) it is announced, and a line
    every BUILD_HEARTBEAT seconds says it is still going."""
    if what is None:
        return subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL,
                              preexec_fn=_lower_priority).returncode
    _say(f"building {what} (first build of this program; compiling the SDK and its "
         "dependencies can take a few minutes on a fresh machine)")
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, preexec_fn=_lower_priority)
    while True:
        try:
            code = proc.wait(timeout=BUILD_HEARTBEAT)
            break
        except subprocess.TimeoutExpired:
            _say(f"still building {what} ({time.monotonic() - started:.0f} s)")
    if code == 0:
        _say(f"built {what} in {time.monotonic() - started:.1f} s")
    return code


def go(path: Path) -> list[str] | int:
    if not shutil.which("go"):
        return _fail("a .go workflow needs the go toolchain on PATH")
    source = path.read_bytes()
    work = _keyed_dir("go", source)
    work.mkdir(parents=True, exist_ok=True)
    _write(work / "go.mod", "module cryo.local/script\n\ngo 1.21\n\n"
           "require cryosleep.io/go v0.0.0\n\n"
           f"replace cryosleep.io/go => {SDKS / 'go'}\n")
    _write(work / "main.go", source)
    binary = work / "script"
    tmp = work / f".script.{os.getpid()}"
    cold = not binary.exists()
    code = _build(["go", "build", "-o", str(tmp), "."], work,
                  f"{path.name} with go" if cold else None)
    if code != 0:
        return code
    os.replace(tmp, binary)
    return [str(binary)]


def rust(path: Path) -> list[str] | int:
    if not shutil.which("cargo"):
        return _fail("a .rs workflow needs cargo on PATH")
    source = path.read_bytes()
    work = _keyed_dir("rust", source)
    name = "s" + work.name
    work.mkdir(parents=True, exist_ok=True)
    _write(work / "Cargo.toml", f'[package]\nname = "{name}"\nversion = "0.0.0"\n'
           'edition = "2021"\npublish = false\n\n'
           f'[[bin]]\nname = "{name}"\npath = "main.rs"\n\n'
           f'[dependencies]\ncryosleep = {{ path = "{SDKS / "rust"}" }}\n'
           + ('serde = { version = "1", features = ["derive"] }\n'
              if _USES_SERDE.search(source) else "") + "\n"
           # The log is the program's output: compiler warnings would end up in it.
           '[lints.rust]\nwarnings = "allow"\n\n[workspace]\n')
    _write(work / "main.rs", source)
    lock = SDKS / "rust" / "Cargo.lock"
    if lock.is_file() and not (work / "Cargo.lock").exists():
        shutil.copyfile(lock, work / "Cargo.lock")
    target = rust_target_dir()
    binary = target / "debug" / name
    cold = not binary.exists()
    code = _build(["cargo", "build", "--quiet", "--manifest-path", str(work / "Cargo.toml"),
                   "--target-dir", str(target)], work, f"{path.name} with cargo" if cold else None)
    if code != 0:
        return code
    return [str(binary)]


# -- warming the caches (scripts/setup) ----------------------------------------------------

_WARM_PROGRAMS = {
    "go": ("warm.go", 'package main\n\nimport _ "cryosleep.io/go"\n\nfunc main() {}\n'),
    # serde's derive too: a workflow that uses it then builds without fetching anything.
    "rust": ("warm.rs", "use serde::{Deserialize, Serialize};\n\n"
             "#[derive(Serialize, Deserialize)]\nstruct Warm { ok: bool }\n\n"
             "fn main() { let _ = cryosleep::serde_json::to_string(&Warm { ok: true }); }\n"),
}
_TOOL = {"go": ["go", "version"], "rust": ["cargo", "--version"]}


def _warm_stamp(lang: str) -> str:
    """What a warm build depends on: the SDK's sources, the warm program, the toolchain."""
    digest = hashlib.sha256(_WARM_PROGRAMS[lang][1].encode())
    sdk = SDKS / lang
    for f in sorted(p for p in sdk.rglob("*") if p.is_file() and "target" not in p.parts):
        digest.update(str(f.relative_to(sdk)).encode() + b"\0" + f.read_bytes())
    version = subprocess.run(_TOOL[lang], capture_output=True, text=True).stdout
    digest.update(version.encode())
    return digest.hexdigest()


def warm(lang: str) -> int:
    """Build a trivial program of `lang` exactly as a workflow is built, once per SDK and
    toolchain version; 0 when warm (or nothing to do), else the build's exit code."""
    if not shutil.which(_TOOL[lang][0]):
        return 0
    stamp = build_cache() / "warm" / f"{lang}.stamp"
    want = _warm_stamp(lang)
    if stamp.is_file() and stamp.read_text() == want:
        return 0
    name, text = _WARM_PROGRAMS[lang]
    scratch = build_cache() / "warm"
    scratch.mkdir(parents=True, exist_ok=True)
    program = scratch / name
    _write(program, text)
    _say(f"warming the {lang} build cache, so {name[-3:]} workflows start fast (a minute or "
         "two the first time)")
    prepared = go(program) if lang == "go" else rust(program)
    if isinstance(prepared, int):
        return prepared
    _write(stamp, want)
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        return _fail("usage: python -m agent.toolchains FILE [ARG...] | --warm [go|rust]...", 2)
    if argv[0] == "--warm":
        langs = argv[1:] or ["go", "rust"]
        if not set(langs) <= set(_WARM_PROGRAMS):
            return _fail(f"--warm takes go and/or rust, not {' '.join(langs)}", 2)
        return max(warm(lang) for lang in langs)
    path = Path(argv[0]).resolve()
    ext = path.suffix.lower()
    if not path.is_file():
        return _fail(f"no such file: {path}")
    if ext in (".ts", ".mts"):
        prepared = typescript(path)
    elif ext == ".go":
        prepared = go(path)
    elif ext == ".rs":
        prepared = rust(path)
    else:
        return _fail(f"no toolchain for {ext or 'a file without an extension'}", 2)
    if isinstance(prepared, int):
        return prepared
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(prepared[0], [*prepared, *argv[1:]])
    except OSError as e:
        return _fail(f"cannot start {prepared[0]}: {e.strerror or e}", 126)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
