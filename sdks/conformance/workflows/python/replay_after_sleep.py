"""Conformance: a step_fn recorded before a sleep is replayed after it, not run again."""

from cryosleep import script


def compute() -> int:
    print("computing")
    return 41


print("pass")
value = script.step_fn("compute", compute)
print(f"value={value}")
script.sleep("1s")
print(f"after sleep value={value + 1}")
