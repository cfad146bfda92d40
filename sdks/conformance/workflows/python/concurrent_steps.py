"""Conformance: six step_fn calls run concurrently (threads) and replay by identity."""

import time
from concurrent.futures import ThreadPoolExecutor

from cryosleep import script


def step(i: int) -> int:
    def body() -> int:
        time.sleep((7 - i) / 10)  # the last started finishes first
        return i

    return script.step_fn(f"p{i}", body)


print("pass")
with ThreadPoolExecutor(6) as pool:
    total = sum(pool.map(step, range(1, 7)))
print(f"sum={total}")
script.sleep("1s")
print(f"after sleep sum={total}")
