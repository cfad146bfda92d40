"""YAML pipelines (cryosleep/pipeline/v1): a CI-shaped file of jobs that compiles to a
graph document (cryosleep-graph/v1) and then runs on the graph interpreter, unchanged.

`yaml_load` reads the file safely, `jobs` turns one job into one graph node, `compile`
checks the whole pipeline and hands the graph to cryopg.graphs.document.compile_graph.
"""

from __future__ import annotations

from cryopg.pipelines.compile import (
    VERSION,
    PipelineError,
    compile_pipeline,
    is_pipeline,
    to_graph,
)

__all__ = ["VERSION", "PipelineError", "compile_pipeline", "is_pipeline", "to_graph"]
