"""Child of flaky_step: step_fn `flaky` raises on the first attempt only."""

import os

from cryosleep import script

attempt = os.environ["CRYO_ATTEMPT"]


def before() -> int:
    print("before ran")
    return 1


def flaky() -> str:
    print("flaky ran")
    if attempt == "1":
        raise RuntimeError("flaky failed on the first attempt")
    return "ok"


print(f"attempt {attempt}")
a = script.step_fn("before", before)
b = script.step_fn("flaky", flaky)
print(f"before={a} flaky={b}")
