"""Where the browser tests leave their performance figures for bench/ui_bench.py: a JSON
object in $CRYOPG_UI_PERF (when set), merged key by key."""

from __future__ import annotations

import json
import os
from pathlib import Path


def record(**figures: float) -> None:
    path = os.environ.get("CRYOPG_UI_PERF")
    if not path:
        return
    p = Path(path)
    got = json.loads(p.read_text()) if p.exists() else {}
    got.update(figures)
    p.write_text(json.dumps(got, indent=1))
