"""A preview environment for a pull request: deploy it, park until the PR closes
(holding no agent, however long that takes), then tear it down.

deploy() and teardown() are real functions whose results persist: each runs once, and
the replay after the wait gets deploy's recorded answer back instead of deploying again.
Here they keep the "environment" in ./envs/ beside this file; yours call your cloud.
"""

import json
from pathlib import Path

from cryosleep import script

ENVS = Path("envs")


def deploy(pr: int) -> dict:
    env = {"name": f"pr-{pr}", "url": f"https://pr-{pr}.preview.example.com"}
    ENVS.mkdir(exist_ok=True)
    (ENVS / f"{env['name']}.json").write_text(json.dumps(env))
    return env


def teardown(env: dict) -> str:
    (ENVS / f"{env['name']}.json").unlink(missing_ok=True)
    return f"removed {env['name']}"


pr = (script.input() or {}).get("pr", 7)
env = script.step_fn("deploy", lambda: deploy(pr))
print(f"deployed {env['name']} at {env['url']}")
script.output_set("url", env["url"])
closed = script.wait_event("pr.closed")  # parks: the agent is free until it arrives
print(f"pr.closed arrived: {json.dumps(closed)}")
print(script.step_fn("teardown", lambda: teardown(env)))
