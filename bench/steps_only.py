"""Only the in-script step section of driver.py (no peers venv needed):
`.venv/bin/python bench/steps_only.py [N]` prints first-pass and replay ms per `cryopg step`."""

from __future__ import annotations

import dataclasses
import json
import sys

import driver  # bench/driver.py, beside this file


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else driver.FULL.steps
    bench = driver.Bench(dataclasses.replace(driver.FULL, steps=n), 1)
    try:
        bench.start()
        print(json.dumps(driver.steps(bench), indent=1))
    finally:
        bench.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
