"""The log mover with several replicas (issue 36): three `cryopg server` replicas move
finished runs' logs to one S3 store while one of them is killed mid-move and the store
goes away and comes back; every log then reads back byte-identical from every replica,
the bucket holds exactly the objects the database names, and the counts add up. And a
50 MB log moves in bounded memory.

Agents talk to r1 only, and r1 is never killed: a replica killed under an agent cuts that
agent's log posts (which are not idempotent) and its runs' logs would differ by design of
the agent path, not the mover's. r2 and r3 race to move every log (r1 moves only what
has waited a minute, so the kill surely lands on a mover mid-move) and all three serve
reads; a kill hits whichever of r2 and r3 holds a lease on a large log being moved.
"""

from __future__ import annotations

import hashlib
import threading

from tests.chaos.deploy import Chaos, S3Store
from tests.e2e.helpers import wait_for

LEASE = "3"  # seconds: a killed mover's logs are taken over soon after
LARGE = {2_700_000: "about 20 MB", 4_000_000: "about 31 MB"}
SMALL = 24


def _script(tag: str, lines: int) -> str:
    # -onlcr: the PTY passes "\n" as is, so the log is exactly what the script prints.
    return f"stty -onlcr; echo {tag}; seq 1 {lines}\n"


def _expected(tag: str, lines: int) -> bytes:
    return f"{tag}\n".encode() + "".join(f"{i}\n" for i in range(1, lines + 1)).encode()


def _said(chaos: Chaos, text: str) -> bool:
    return any(text in p.read_text(errors="replace") for p in chaos.logs
               if p.name.startswith("server-"))


def _victim(chaos: Chaos, large: list[str]) -> str | None:
    """A replica among r2 and r3 holding a live lease, one on a large log first."""
    held = chaos.sql("SELECT holder FROM cryo.log_moves WHERE holder IN ('r2', 'r3') "
                       "AND lease_expires_at > now() AND run_id = ANY (%s)", (large,))
    return str(held[0][0]) if held else None


def _moved(chaos: Chaos, runs: list[str]) -> int:
    return int(chaos.sql("SELECT count(*) FROM cryo.log_archives WHERE run_id = ANY (%s)",
                    (runs,))[0][0])


def test_replicas_killed_and_a_store_outage_mid_move_lose_no_byte_and_leave_no_object(
        chaos: Chaos, s3: S3Store) -> None:
    env = chaos.log_store_env(s3, move_after=0, CRYOPG_LOGS_S3_LEASE=LEASE,
                              CRYOPG_LOGS_S3_OUTAGE_GRACE="600")
    chaos.replica("r1", **dict(env, CRYOPG_LOGS_S3_MOVE_AFTER="60"))
    for name in ("r2", "r3"):
        chaos.replica(name, **env)
    chaos.agents(3, ["r1"])
    want: dict[str, bytes] = {}
    large = []
    for lines, what in LARGE.items():
        run_id = chaos.submit("r1", _script(f"large {what}", lines))
        want[run_id] = _expected(f"large {what}", lines)
        large.append(run_id)
    for i in range(SMALL):
        lines = 50 * (i + 1)
        run_id = chaos.submit("r1", _script(f"small-{i}", lines))
        want[run_id] = _expected(f"small-{i}", lines)
    runs = list(want)

    # A replica killed while it moves a log (its lease lapses; another takes it over).
    # (the large runs must end first: slow on a loaded machine, hence the long deadline)
    victim = wait_for("r2 or r3 to hold a lease on a large log being moved",
                      lambda: _victim(chaos, large), timeout=300, every=0.02)
    chaos.kill(victim)
    # Its leases, as it left them: each is taken over by another replica (unless the
    # call recording it was already on its way to the database when the process died).
    taken = dict(chaos.sql("SELECT run_id, attempt_id FROM cryo.log_moves WHERE holder = %s",
                      (victim,)))
    # The store gone mid-move: every mover's attempt fails, logs wait (within the grace,
    # whole), and it comes back with what it held.
    wait_for("a move under way", lambda: chaos.sql("SELECT 1 FROM cryo.log_moves "
                                                     "WHERE lease_expires_at > now()") or
             _moved(chaos, runs) == len(runs), timeout=60, every=0.02)
    s3.stop()
    wait_for("a mover to find the store gone",
             lambda: _said(chaos, "log store unavailable"), timeout=60)
    chaos.restart(victim)
    s3.start()

    def settled() -> bool:
        left = chaos.sql("SELECT (SELECT count(*) FROM cryo.runs WHERE id = ANY (%s) "
                           "AND finished_at IS NULL), (SELECT count(*) FROM cryo.logs "
                           "WHERE run_id = ANY (%s)), (SELECT count(*) FROM cryo.log_moves),"
                           " (SELECT count(*) FROM cryo.log_objects_to_delete)",
                    (runs, runs))[0]
        return left == (0, 0, 0, 0) and _moved(chaos, runs) == len(runs)

    wait_for("every log moved and every failed attempt's object deleted", settled,
             timeout=150, every=0.5)
    statuses = {chaos.run("r1", r)["status"] for r in runs}
    assert statuses == {"succeeded"}, statuses

    # Every log, from every replica, byte for byte.
    for run_id, expected in want.items():
        for name in ("r1", "r2", "r3"):
            code, got = chaos.raw(name, f"/runs/{run_id}/logs")
            assert code == 200, (name, run_id, got[:300])
            assert len(got) == len(expected) and got == expected, (name, run_id, len(got))

    # The bucket holds exactly the objects the database names, as verified when moved.
    archives = {k: (n, bytes(h), nb, a) for k, n, h, nb, a in chaos.sql(
        "SELECT object_key, object_bytes, sha256, bytes, attempts FROM cryo.log_archives")}
    assert s3.keys() == {k: v[0] for k, v in archives.items()}
    for key, (_, digest, _, _) in archives.items():
        body = s3.client().get_object(Bucket=s3.bucket, Key=key)["Body"].read()
        assert hashlib.sha256(body).digest() == digest, key
    # Counts: one archive a run, its log's bytes, and the taken-over runs' extra attempts.
    assert len(archives) == len(runs)
    assert sum(v[2] for v in archives.values()) == sum(len(b) for b in want.values())
    attempts = dict(chaos.sql("SELECT run_id, attempts FROM cryo.log_archives"))
    by = dict(chaos.sql("SELECT run_id, attempt_id FROM cryo.log_archives"))
    for run_id, dead in taken.items():
        assert attempts[run_id] >= 2 or by[run_id] == dead, (run_id, attempts[run_id])
    assert any(a >= 2 for a in attempts.values())  # the outage failed attempts too
    # A multipart upload the killed replica began stays open until the bucket's lifecycle
    # rule aborts it (docs/replicas.md): parts, never an object.
    print(f"moved {len(runs)} logs; {sum(a - 1 for a in attempts.values())} attempts "
          f"retried; killed {victim} holding {len(taken)} lease(s); "
          f"{len(s3.uploads())} multipart upload(s) left open")


def test_two_replicas_moving_the_same_logs_lose_none(chaos: Chaos, s3: S3Store) -> None:
    """Issue 36's first report, nothing killed: two replicas used to pick the same logs,
    the later one packing what was left after the first dropped the chunks (before this
    fix, 3 of these 16 logs read back short or empty)."""
    env = chaos.log_store_env(s3, move_after=3)
    for name in ("r1", "r2"):
        chaos.replica(name, **env)
    chaos.agents(3, ["r1", "r2"])
    want = {}
    for i in range(16):  # about 1.3 MB each: moves long enough to overlap
        lines = 150_000 + 1000 * i
        want[chaos.submit("r1", _script(f"log-{i}", lines))] = _expected(f"log-{i}", lines)
    runs = list(want)
    wait_for("every log to move", lambda: _moved(chaos, runs) == len(runs), timeout=120,
             every=0.5)
    bad = [(r, name) for r in runs for name in ("r1", "r2")
           if chaos.raw(name, f"/runs/{r}/logs") != (200, want[r])]
    assert bad == []
    assert s3.keys().keys() == {k for (k,) in chaos.sql("SELECT object_key "
                                                          "FROM cryo.log_archives")}


def test_a_50mb_log_moves_in_bounded_memory(chaos: Chaos, s3: S3Store) -> None:
    """r1 takes the agent's posts; r2 only moves (and has done nothing else), so what its
    resident memory gains while the log moves is the mover's."""
    lines = 6_400_000  # about 50 MB
    chaos.replica("r1", **chaos.log_store_env(s3, move_after=3600))
    chaos.agents(1, ["r1"])
    run_id = chaos.submit("r1", _script("big", lines))
    wait_for("the 50 MB run to end",
             lambda: chaos.run("r1", run_id)["status"] in ("succeeded", "failed"),
             timeout=240, every=0.5)
    chaos.replica("r2", **chaos.log_store_env(s3, move_after=0))
    idle = chaos.rss("r2")[0]
    peak = [idle]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], chaos.rss("r2")[0])
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        wait_for("the log to move", lambda: _moved(chaos, [run_id]) == 1, timeout=240,
                 every=0.2)
    finally:
        done.set()
        sampler.join()
    peak[0] = max(peak[0], chaos.rss("r2")[1])  # the kernel's high-water mark too
    above = peak[0] - idle
    print(f"r2 resident: {idle / 2**20:.1f} MiB idle, {peak[0] / 2**20:.1f} MiB at peak "
          f"while a 50 MB log moved: +{above / 2**20:.1f} MiB")
    assert above < 64 << 20, above
    code, got = chaos.raw("r2", f"/runs/{run_id}/logs")
    assert code == 200 and got == _expected("big", lines)
