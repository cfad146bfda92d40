"""Conformance: the preview-environment shape (deploy, park on an event, tear down)."""

import json

from cryosleep import script


def deploy() -> dict[str, str]:
    print("deploying")
    return {"name": "pr-7", "url": "https://pr-7.preview.test"}


def teardown(env: dict[str, str]) -> bool:
    print(f"tearing down {env['name']}")
    return True


print("pass")
env = script.step_fn("deploy", deploy)
print(f"env={env['name']}")
closed = script.wait_event("pr.closed")
print("closed=" + json.dumps(closed, separators=(",", ":")))
script.step_fn("teardown", lambda: teardown(env))
print("done")
