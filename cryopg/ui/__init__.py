"""The web UI: static files (no build step) the server hands out at `/`.

The pages call the public HTTP API with the user's own token (kept in the browser's
sessionStorage); nothing here reads the database. See cryopg/server/ui.py.
"""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).parent / "static"
