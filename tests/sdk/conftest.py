"""The SDK tests import the Python SDK from this checkout, as an agent-run script would."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SDK_PYTHON = ROOT / "sdks" / "python"
CONFORMANCE = ROOT / "sdks" / "conformance"
if str(SDK_PYTHON) not in sys.path:
    sys.path.insert(0, str(SDK_PYTHON))
