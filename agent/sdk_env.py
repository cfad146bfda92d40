"""Where a script finds the SDKs of this checkout: the Python package on PYTHONPATH and
the bash prelude as $CRYO_PRELUDE. Absent directories (an agent installed without the
repo's sdks/) add nothing."""

from __future__ import annotations

import os
from pathlib import Path

SDKS = Path(__file__).resolve().parent.parent / "sdks"


def add_sdk_paths(env: dict[str, str]) -> None:
    python = SDKS / "python"
    if (python / "cryosleep").is_dir():
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join([*parts, str(python)])  # the user's copy wins
    prelude = SDKS / "bash" / "prelude.sh"
    if prelude.is_file():
        env["CRYO_PRELUDE"] = str(prelude)
