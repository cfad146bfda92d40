"""Each tier imports only the tiers below it (ARCHITECTURE.md, "The tiers").

Every module of cryopg/ and agent/ belongs to exactly one tier, and every import
statement counts (lazy and TYPE_CHECKING ones too, as in test_import_graph.py). Tiers on
one level are peers: neither imports the other. There is no exception list.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_import_graph import ROOT, import_graph

# Lowest first. A tier is a name and the modules it holds (a name covers its submodules).
LEVELS: list[dict[str, tuple[str, ...]]] = [
    {"base": ("cryopg", "cryopg.errors", "cryopg.paths", "cryopg.jsonlimits",
              "cryopg.redaction", "cryopg.run_ids", "cryopg.egress", "cryopg.seal",
              "cryopg.db", "cryopg.devpg", "cryopg.migrate", "cryopg.schema_dump",
              "cryopg.secret_env", "cryopg.objectstore", "cryopg.ui", "cryopg.tracing",
              "cryopg.logfmt", "cryopg.replica")},
    {"engine calls": ("cryopg.engine",)},
    {"sealed calls": ("cryopg.payloads", "cryopg.state_incr")},
    {"graphs": ("cryopg.graphs",), "logstore": ("cryopg.logstore",),
     "artifacts": ("cryopg.artifacts",)},
    {"pipelines": ("cryopg.pipelines",), "triggers": ("cryopg.triggers",)},
    {"server": ("cryopg.server",), "agent": ("agent",)},
    {"cli": ("cryopg.cli",)},
]


def tier_of(module: str) -> tuple[int, str] | None:
    """(level, tier) of a module: the tier naming its longest prefix."""
    best: tuple[int, tuple[int, str]] | None = None
    for level, tiers in enumerate(LEVELS):
        for tier, prefixes in tiers.items():
            for p in prefixes:
                if (module == p or module.startswith(p + ".")) and (
                        best is None or len(p) > best[0]):
                    best = (len(p), (level, tier))
    return None if best is None else best[1]


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a higher tier or of a peer, as 'a (tier) -> b (tier)'."""
    found = []
    for src, targets in sorted(graph.items()):
        s = tier_of(src)
        for dst in sorted(targets):
            d = tier_of(dst)
            if s is None or d is None or d[1] == s[1]:
                continue
            if d[0] >= s[0]:
                found.append(f"{src} ({s[1]}) -> {dst} ({d[1]})")
    return found


def test_every_module_has_a_tier() -> None:
    graph = import_graph()
    assert "cryopg.server.app" in graph and "agent.loop" in graph
    assert [m for m in graph if tier_of(m) is None] == []


def test_the_check_finds_an_upward_and_a_sideways_import() -> None:
    graph = {"cryopg.graphs.driver": {"cryopg.server.app_state", "cryopg.engine"},
             "agent.loop": {"cryopg.server.app"}, "cryopg.cli.main": {"agent.loop"}}
    assert upward(graph) == [
        "agent.loop (agent) -> cryopg.server.app (server)",
        "cryopg.graphs.driver (graphs) -> cryopg.server.app_state (server)"]


def test_no_tier_imports_a_higher_tier_or_a_peer() -> None:
    bad = upward(import_graph())
    assert not bad, "imports against the tiers (ARCHITECTURE.md):\n" + "\n".join(bad)


def test_architecture_md_lists_these_tiers() -> None:
    """Its tier table, highest first, names the tiers of LEVELS (the database aside), and
    every path it names under cryopg/, agent/, tests/ or sql/ is there."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text.split("## The tiers", 1)[1].split("\n\n|", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1].strip().lower() for line in ("|" + table).splitlines()[2:]]
    assert rows[:-1] == [", ".join(tiers) for tiers in reversed(LEVELS)]
    assert rows[-1] == "database"
    paths = set(re.findall(r"`((?:cryopg|agent|tests|sql)/[\w/.<>-]*)`", text))
    assert paths and [p for p in sorted(paths)
                      if "<" not in p and not (ROOT / p.rstrip("/")).exists()] == []


def test_one_module_builds_the_s3_client() -> None:
    """Logs and artifacts reach S3 through cryopg/objectstore.py, which alone builds
    obstore's S3 client (with the timeouts each caller passes)."""
    builders = []
    for package in ("cryopg", "agent"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "obstore.store" or (
                        isinstance(node, ast.Import)
                        and any(a.name == "obstore.store" for a in node.names)):
                    builders.append(Path(path).relative_to(ROOT).as_posix())
    assert sorted(set(builders)) == ["cryopg/objectstore.py"]
