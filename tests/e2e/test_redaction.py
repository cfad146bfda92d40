"""Redaction that cannot be sidestepped, end to end through a real `cryopg dev`: each
test is one of the moves that printed or stored a secret in clear, and reads back what a
Viewer sees (the full log, `runs show --json`, state reads, the event list) to find no
secret in it, while the run itself still reads its true values."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.helpers import http, script, show, submit

# Whole-log assertions: a claim lapsing on a loaded machine would replay a pass and
# print its lines twice, so these runs keep a claim long enough to ride out the load.
pytestmark = pytest.mark.claim_seconds(30)

SECRET = "tok-9f3b1c77a2e4-Zq"
PIN = "48151623"
MULTI = "line-one-AAAA1111\nline-two-BBBB2222\nline-3-CCCC3333"
MASK = "[secret]"


def _set_secret(stack: Any, name: str, value: str) -> None:
    path = stack.dir / f"{name}.value"
    path.write_text(value)
    done = stack.cli("secret", "set", name, "--file", str(path))
    assert done.returncode == 0, done.stderr
    path.unlink()


def _pieces(secret: str, n: int = 6) -> list[str]:
    """Every piece of the secret at least n characters long (within one line)."""
    return [secret[i:j] for i in range(len(secret)) for j in range(i + n, len(secret) + 1)
            if "\n" not in secret[i:j]]


def _assert_clean(text: str, secret: str, n: int = 6) -> None:
    text = text.replace(MASK, "|")
    leaked = [p for p in _pieces(secret, n) if p in text]
    assert not leaked, f"{leaked[:3]} in {text!r}"


def _log(stack: Any, run_id: str) -> str:
    done = stack.cli("logs", run_id, "--follow", timeout=90)
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_a_multi_line_secret_printed_after_stty_onlcr_is_masked(stack: Any) -> None:
    _set_secret(stack, "ML_KEY", MULTI)
    wf = script(stack.dir, "ml.sh", """\
stty onlcr
printf 'key:\\n%s\\n' "$ML_KEY"
printf 'second line alone: %s\\n' "$(printf '%s\\n' "$ML_KEY" | sed -n 2p)"
echo done
""")
    run_id = submit(stack, wf)
    log = _log(stack, run_id)
    assert show(stack, run_id)["status"] == "succeeded"
    status, raw = http(f"{stack.url}/api/v1/orgs/dev/projects/default/runs/{run_id}/logs",
                       stack.info["user_token"])
    assert status == 200 and b"\r\n" in raw, raw  # onlcr was on: the log has CRLF
    for text in (log, raw.decode()):
        _assert_clean(text, MULTI, 8)
        assert text.count(MASK) >= 2 and "done" in text, text


def test_a_prefix_printed_before_a_park_and_the_rest_after_it(stack: Any) -> None:
    _set_secret(stack, "API_KEY", SECRET)
    mark = stack.dir / "first-pass-done"
    wf = script(stack.dir, "park.sh", f"""\
if [ ! -e {mark} ]; then
  touch {mark}
  printf 'head: %s' "${{API_KEY:0:9}}"
fi
cryopg sleep 1s
printf '%s :tail\\n' "${{API_KEY:9}}"
""")
    run_id = submit(stack, wf)
    log = _log(stack, run_id)
    assert show(stack, run_id)["status"] == "succeeded"
    assert SECRET not in log and SECRET[:9] not in log, log
    assert SECRET[:4] not in log, log  # nothing meaningful of the first pass's half
    assert f"head: {MASK}" in log, log


def test_a_value_printed_in_two_halves_around_flushes_and_a_verb(stack: Any) -> None:
    _set_secret(stack, "API_KEY", SECRET)
    # The lock is free: the agent sends what was printed before asking (the pass might
    # park there), and the pass then goes on to print the rest.
    wf = script(stack.dir, "halves.sh", """\
printf 'a: %s' "${API_KEY:0:7}"
sleep 0.5
printf '%s :a\\n' "${API_KEY:7}"
printf 'b: %s' "${API_KEY:0:8}"
cryopg lock g -- true
printf '%s :b\\n' "${API_KEY:8}"
for i in $(seq 0 $((${#API_KEY} - 1))); do printf '%s' "${API_KEY:$i:1}"; sleep 0.02; done
echo ' :c'
""")
    run_id = submit(stack, wf)
    log = _log(stack, run_id)
    assert show(stack, run_id)["status"] == "succeeded"
    _assert_clean(log, SECRET, 5)
    assert log.count(MASK) >= 3 and ":a" in log and ":b" in log and ":c" in log, log


def test_payloads_a_run_copies_a_secret_into_are_masked_for_users(stack: Any) -> None:
    _set_secret(stack, "API_KEY", SECRET)
    _set_secret(stack, "PIN", PIN)
    wf = script(stack.dir, "payloads.sh", """\
cryopg state set pin "$PIN"
cryopg output set token "$API_KEY"
cryopg output set "key-$API_KEY" plain
cryopg annotate "deploying with $API_KEY"
cryopg state set cred "$API_KEY"
cryopg state set --entity acct cred "{\\"nested\\": [\\"Bearer $API_KEY\\"]}"
cryopg emit deployed "{\\"key\\": \\"$API_KEY\\"}"
cryopg sleep 1s
# The run itself reads the true values, on every pass.
[ "$(cryopg state get cred)" = "$API_KEY" ] && echo "run reads the true cell"
""")
    run_id = submit(stack, wf)
    log = _log(stack, run_id)
    assert "run reads the true cell" in log, log
    run = show(stack, run_id)
    assert run["status"] == "succeeded", run
    assert run["outputs"]["token"] == MASK and run["outputs"][f"key-{MASK}"] == "plain"
    assert any(h.get("text") == f"deploying with {MASK}" for h in run["history"]), run
    seen = {"show": json.dumps(run)}
    for args in (["state", "get", "cred", "--run", run_id],
                 ["state", "get", "cred", "--entity", "acct"],
                 ["events", "--json"], ["runs", "show", run_id]):
        done = stack.cli(*args)
        assert done.returncode == 0, (args, done.stderr)
        seen[" ".join(args)] = done.stdout
    assert seen[f"state get cred --run {run_id}"].strip() == MASK
    pin = stack.cli("state", "get", "pin", "--run", run_id)  # stored as a JSON number
    assert pin.returncode == 0 and pin.stdout.strip() == MASK, (pin.stdout, pin.stderr)
    assert MASK in seen["state get cred --entity acct"]
    assert MASK in seen["events --json"]
    base = f"{stack.url}/api/v1/orgs/dev/projects/default"
    for path in (f"/runs/{run_id}/state", f"/runs/{run_id}/entity-state",
                 "/entities/acct/state", "/events", f"/runs/{run_id}/checkpoints", "/runs"):
        status, body = http(base + path, stack.info["user_token"])
        assert status == 200, (path, body)
        seen[path] = json.dumps(body)
    for where, text in seen.items():
        assert SECRET not in text and PIN not in text, (where, text)
        _assert_clean(text, SECRET)


def test_a_secret_too_short_to_mask_is_refused(stack: Any) -> None:
    for value in ("abc", "pw12", "  x  "):
        done = stack.cli("secret", "set", "TINY", input=value + "\n")
        assert done.returncode != 0, done.stdout
        err = done.stderr.strip()
        assert "at least 6 characters" in err and "\n" not in err, err
        assert "Traceback" not in done.stderr
    assert "TINY" not in stack.cli("secret", "list").stdout
    status, body = http(f"{stack.url}/api/v1/orgs/dev/projects/default/secrets/TINY",
                        stack.info["user_token"], "PUT", {"value": "12345"})
    assert status == 400 and body["error"]["code"] == "invalid_argument", body
