"""Redaction that cannot be sidestepped, end to end through a real `cryopg dev`: each
test is one of the moves that printed or stored a secret in clear, and reads back what a
Viewer sees (the full log, `runs show --json`, state reads, the event list) to find no
secret in it, while the run itself still reads its true values."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import psycopg
import pytest

from tests.e2e.helpers import http, script, show, submit

# Whole-log assertions: a claim lapsing on a loaded machine would replay a pass and
# print its lines twice, so these runs keep a claim long enough to ride out the load.
pytestmark = pytest.mark.claim_seconds(30)

SECRET = "tok-9f3b1c77a2e4-Zq"
PIN = "48151623"
MULTI = "line-one-AAAA1111\nline-two-BBBB2222\nline-3-CCCC3333"
MASK = "[secret]"
LONG = "tok-9f3b1c77a2e4-Zq-7d1e55c0b9a8f"  # 33 characters, as in the report


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
    status, raw = http(f"{stack.project_url}/runs/{run_id}/logs",
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
    _assert_clean(log, SECRET, 5)  # nor of the rest, printed by the next pass
    assert ":tail" in log, log


def test_the_rest_of_a_secret_after_a_park_is_masked_even_after_other_output(
        stack: Any) -> None:
    # The report's figures: 12 of a 33-character secret before the park; the next pass
    # prints something else first, then the other 21.
    _set_secret(stack, "LONG_KEY", LONG)
    mark = stack.dir / "long-first-pass-done"
    wf = script(stack.dir, "park-long.sh", f"""\
if [ ! -e {mark} ]; then
  touch {mark}
  printf 'head: %s' "${{LONG_KEY:0:12}}"
fi
cryopg sleep 1s
echo 'second pass'
printf '%s :tail\\n' "${{LONG_KEY:12}}"
""")
    run_id = submit(stack, wf)
    log = _log(stack, run_id)
    assert show(stack, run_id)["status"] == "succeeded"
    _assert_clean(log, LONG, 5)
    assert "second pass" in log and ":tail" in log, log


def test_a_secret_split_coloured_or_encoded_is_masked(stack: Any) -> None:
    _set_secret(stack, "API_KEY", LONG)
    wf = script(stack.dir, "forms.sh", """\
printf 'split: %s\\n%s :1\\n' "${API_KEY:0:10}" "${API_KEY:10}"
printf 'crlf: %s\\r\\n%s :2\\n' "${API_KEY:0:20}" "${API_KEY:20}"
printf 'ansi: \\033[31m%s\\033[0m%s\\033]0;t\\007%s :3\\n' \\
  "${API_KEY:0:5}" "${API_KEY:5:9}" "${API_KEY:14}"
printf 'b64: '; printf '%s' "$API_KEY" | base64; echo ' :4'
printf 'b64+1: '; printf 'x%s' "$API_KEY" | base64 | tr '+/' '-_'; echo ' :5'
printf 'b64+2: '; printf 'xy%s' "$API_KEY" | base64 -w 16; echo ' :6'
printf 'hex: '; printf '%s' "$API_KEY" | od -An -v -tx1 | tr -d ' \\n'; echo ' :7'
echo done
""")
    run_id = submit(stack, wf)
    log = _log(stack, run_id)
    assert show(stack, run_id)["status"] == "succeeded"
    status, raw = http(f"{stack.project_url}/runs/{run_id}/logs",
                       stack.info["user_token"])
    assert status == 200
    shown = re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|[\r\n]", "",
                   raw.decode().replace(MASK, "|"))
    _assert_clean(shown, LONG, 6)
    encoded = [LONG.encode().hex()]
    for lead in ("", "x", "xy"):
        b64 = base64.b64encode((lead + LONG).encode()).decode()
        encoded += [b64[3:-3], b64[3:-3].replace("+", "-").replace("/", "_")]
    for e in encoded:
        _assert_clean(shown, e, 8)
    for n in range(1, 8):
        assert f":{n}" in log, log
    assert log.count(MASK) >= 7 and "done" in log, log


def test_a_secret_in_a_step_name_is_never_stored(stack: Any, dsn: str) -> None:
    _set_secret(stack, "API_KEY", SECRET)
    wf = script(stack.dir, "named.sh", """\
cryopg step "deploy-$API_KEY" --label "with $API_KEY" -- echo stepped
cryopg sleep 1s
cryopg step "deploy-$API_KEY" --label "with $API_KEY" -- echo stepped-again
echo done
""")
    run_id = submit(stack, wf)
    log = _log(stack, run_id)
    run = show(stack, run_id)
    assert run["status"] == "succeeded", run
    assert "done" in log and log.count("stepped-again") == 1, log
    seen = {"show": json.dumps(run)}
    with psycopg.connect(dsn, autocommit=True) as db:
        for table in ("history", "journal"):
            rows = db.execute(f"SELECT to_jsonb(t) FROM cryo.{table} t WHERE run_id = %s",
                              (run_id,)).fetchall()
            assert rows, table
            seen[table] = json.dumps([{k: v for k, v in r[0].items()
                                       if not (isinstance(v, str) and v.startswith("\\x"))}
                                      for r in rows])
    assert f"deploy-{MASK}" in seen["journal"], seen["journal"]
    for text in seen.values():
        _assert_clean(text, SECRET)


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
    base = f"{stack.project_url}"
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
    status, body = http(f"{stack.project_url}/secrets/TINY",
                        stack.info["user_token"], "PUT", {"value": "12345"})
    assert status == 400 and body["error"]["code"] == "invalid_argument", body
