"""What the server's worker processes run (cryopg/server/offload.py): pure functions of
a request's text, with no aiohttp and no database, whose results and errors pickle
(GraphError, PipelineError and JsonLimitError are plain ValueErrors)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from cryopg.graphs.document import NODE_VERSION, Compiled, compile_graph, load
from cryopg.pipelines import compile_pipeline

COMPILE_SECONDS = 10.0  # reading and checking one submitted document


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A submitted graph as the submit route needs it, kept for the next submit of the
    same document: compiled, its text to seal, the nodes its expressions read, and
    whether every node may be a constant state node (then its calls go with the submit,
    and cryo.submit_graph decides whether the database runs it whole)."""

    compiled: Compiled
    text: str
    wanted: set[str] | None
    maybe_constant: bool


def compile_source(source: str, pipeline: bool) -> Compiled:
    """A YAML pipeline or a graph document (JSON), compiled; GraphError/PipelineError."""
    if pipeline:
        return compile_pipeline(source)
    compiled = compile_graph(load(source))
    # The document as written rides along (sealed) for the canvas editor and the node
    # panel, as a pipeline's YAML does: the compiled configs do not read back.
    compiled.document["graph_source"] = source
    return compiled


def prepare(source: str, pipeline: bool) -> Prepared:
    """compile_source, plus what a submit of it needs."""
    from cryopg.graphs.driver import referenced

    compiled = compile_source(source, pipeline)
    structure = compiled.structure
    configs = compiled.document.get("configs", {})
    return Prepared(compiled, compiled.source(), referenced(structure, configs),
                    not any(k in structure for k in ("output", "concurrency")) and all(
                        n.get("type") == "state"
                        and not any(k in n for k in ("if", "fan_out", "concurrency"))
                        for n in structure.get("nodes", [])))


def compile_node(node_type: str, config: dict[str, Any]) -> Compiled:
    """The one-node graph a node call runs (its node id is its type), whose output is the
    node's own output rather than the map of sink nodes a graph gives by default."""
    doc = load(json.dumps({"version": NODE_VERSION, "type": node_type, "config": config}))
    return compile_graph({**doc, "output": {"$expr": f"nodes.{doc['nodes'][0]['id']}.output"}})
