"""The fenced code blocks of README.md, docs/ and every other README (the SDKs', sql/'s,
each example's), and how test_docs.py runs each one. An example's README runs in a copy
of its directory.

A block runs as written unless the line right before its fence marks it:
- `<!-- not run: REASON -->`: shown only (a deployment step, a syntax summary, a fragment
  with placeholders); REASON says which, in a few words (the test checks there are).
- `<!-- file: NAME -->`: a document (JSON, YAML) saved as NAME in the page's working
  directory, where the page's later blocks use it; it is also checked like any document.

What running means, by the fence's language:
- none, `sh`, `bash`: a shell block, run with `bash -eu` against the test's dev stack in
  the page's working directory (blocks of one page share it, in order). A block whose
  lines start with `$ ` is a transcript: each command runs, and the lines under it must
  appear in what it printed.
- `sql`: run on the stack's database, in one transaction that commits.
- `json`: parsed; a graph document compiles. `yaml`: parsed; a pipeline compiles.
- `python`: run with this checkout's Python SDK on the path.
Anything else is an error until it is marked.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL = frozenset({"", "sh", "bash", "shell", "console"})
KINDS = SHELL | {"sql", "json", "yaml", "python"}
_MARK = re.compile(r"^<!--\s*(not run|file):\s*(.+?)\s*-->\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # relative to the checkout
    line: int  # of the opening fence
    lang: str
    text: str
    not_run: str | None = None  # the reason given
    file: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def is_transcript(self) -> bool:
        return self.lang in SHELL and any(ln.startswith("$ ") for ln in self.text.splitlines())


# Not the checkout's pages: installed or vendored trees, and generated results.
_SKIP = frozenset({".git", ".venv", "node_modules", "vendor", "target", ".cryopg", "results"})


def pages() -> list[Path]:
    """README.md, every page under docs/, and every other README.md of the checkout (the
    SDKs', sql/'s, each example's)."""
    readmes = [p for p in ROOT.rglob("README.md")
               if not _SKIP.intersection(p.relative_to(ROOT).parts) and p.parent != ROOT
               and (ROOT / "docs") not in p.parents]
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(readmes)]


def example_dir(page: Path) -> Path | None:
    """An example's README runs in a copy of its directory, as a reader runs it there."""
    rel = page.relative_to(ROOT).parts
    return page.parent if rel[0] == "examples" and len(rel) > 2 else None


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(`{3,})(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1)))
        mark = _MARK.match(lines[i - 1]) if i else None
        kind, value = (mark.group(1), mark.group(2)) if mark else (None, None)
        out.append(Block(str(page.relative_to(ROOT)), i + 1, fence.group(2).lower(),
                         "\n".join(lines[i + 1:end]) + "\n",
                         not_run=value if kind == "not run" else None,
                         file=value if kind == "file" else None))
        i = end + 1
    return out


def transcript(block: Block) -> list[tuple[str, list[str]]]:
    """(command, the lines it must print) for each `$ ` line of a transcript block."""
    steps: list[tuple[str, list[str]]] = []
    for ln in block.text.splitlines():
        if ln.startswith("$ "):
            steps.append((ln[2:], []))
        elif ln.strip() and steps:
            steps[-1][1].append(ln.strip())
    return steps
