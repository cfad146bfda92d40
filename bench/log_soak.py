"""The chaos mover scenario (tests/chaos/test_log_mover.py) for as long as it is given:
`bench/soak --minutes N`. Not in the suite.

Three replicas on one throwaway cluster's database, moto's S3 behind a gate, three agents
on r1; r2 and r3 race to move every log (r1 moves what waited a minute). Round after
round: a batch of runs (small logs and one large one) is submitted, and while their logs
move either the replica holding a lease is killed and restarted, or the store is cut
until a mover notices and then opened again. Each round then checks, and prints, that
every log of the batch reads back byte-identical from every replica, that the bucket
holds exactly the objects cryo.log_archives names (each with the size and SHA-256 it
records), and that no lease or queued deletion is left. Exits 1 at the first failure.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cryopg.devpg import Cluster  # noqa: E402
from cryopg.migrate import migrate  # noqa: E402
from tests.chaos.conftest import Chaos, S3Store  # noqa: E402
from tests.chaos.test_log_mover import _expected, _moved, _script  # noqa: E402
from tests.conftest import _free_tcp_port  # noqa: E402
from tests.e2e.helpers import wait_for  # noqa: E402

LEASE = "3"


def _unavailable_lines(chaos: Chaos) -> int:
    return sum(p.read_text(errors="replace").count("log store unavailable")
               for p in chaos.logs if p.name.startswith("server-") and p.exists())


def _round(chaos: Chaos, s3: S3Store, n: int, small: int, rng: random.Random) -> str:
    want: dict[str, bytes] = {}
    large_lines = rng.randrange(700_000, 3_500_000)  # about 5 to 27 MB
    run_id = chaos.submit("r1", _script(f"soak-{n}-large", large_lines))
    want[run_id] = _expected(f"soak-{n}-large", large_lines)
    for i in range(small):
        lines = rng.randrange(10, 20_000)
        run_id = chaos.submit("r1", _script(f"soak-{n}-{i}", lines))
        want[run_id] = _expected(f"soak-{n}-{i}", lines)
    runs = list(want)
    if n % 2:  # kill whichever of r2 and r3 holds a lease on this batch's logs
        held = wait_for("a lease on this batch", lambda: chaos.sql(
            "SELECT holder FROM cryo.log_moves WHERE holder IN ('r2', 'r3') AND "
                   "lease_expires_at > now() AND run_id = ANY (%s)", (runs,)), timeout=120,
            every=0.02)
        victim = str(held[0][0])
        chaos.kill(victim)
        leases = len(chaos.sql("SELECT 1 FROM cryo.log_moves WHERE holder = %s", (victim,)))
        chaos.restart(victim)
        event = f"killed {victim} holding {leases} lease(s)"
    else:  # cut the store mid-move until a mover notices
        wait_for("a move under way", lambda: chaos.sql(
            "SELECT 1 FROM cryo.log_moves WHERE lease_expires_at > now() AND "
                   "run_id = ANY (%s)", (runs,)), timeout=120, every=0.02)
        before, cut = _unavailable_lines(chaos), time.monotonic()
        s3.stop()
        wait_for("a mover to find the store gone",
                 lambda: _unavailable_lines(chaos) > before, timeout=60)
        s3.start()
        event = f"store cut for {time.monotonic() - cut:.1f} s"

    def settled() -> bool:
        left = chaos.sql("SELECT (SELECT count(*) FROM cryo.runs WHERE id = ANY (%s) "
                           "AND finished_at IS NULL), (SELECT count(*) FROM cryo.logs "
                           "WHERE run_id = ANY (%s)), (SELECT count(*) FROM cryo.log_moves),"
                           " (SELECT count(*) FROM cryo.log_objects_to_delete)",
                    (runs, runs))[0]
        return left == (0, 0, 0, 0) and _moved(chaos, runs) == len(runs)

    wait_for("the batch to move and every failed attempt's object to go", settled,
             timeout=300, every=0.5)
    for run_id, expected in want.items():
        for name in ("r1", "r2", "r3"):
            code, got = chaos.raw(name, f"/runs/{run_id}/logs")
            if code != 200 or got != expected:
                raise AssertionError(f"{run_id} from {name}: {code}, {len(got)} bytes where "
                                     f"{len(expected)} were logged")
    archives = {k: (int(b), bytes(h)) for k, b, h in chaos.sql(
        "SELECT object_key, object_bytes, sha256 FROM cryo.log_archives")}
    listed = s3.keys()
    if listed != {k: b for k, (b, _) in archives.items()}:
        raise AssertionError(f"bucket and archives differ: {set(listed) ^ set(archives)}")
    mine = dict(chaos.sql("SELECT object_key, attempts FROM cryo.log_archives "
                            "WHERE run_id = ANY (%s)", (runs,)))
    for key in mine:
        body = s3.client().get_object(Bucket=s3.bucket, Key=key)["Body"].read()
        if hashlib.sha256(body).digest() != archives[key][1]:
            raise AssertionError(f"{key}: its SHA-256 is not the one recorded")
    mb = sum(len(b) for b in want.values()) / 1e6
    return (f"{event}; {len(runs)} logs ({mb:.1f} MB), {sum(mine.values()) - len(mine)} "
            f"attempt(s) retried; checked: each byte-identical from r1, r2 and r3, bucket = "
            f"cryo.log_archives ({len(listed)} objects, sizes and SHA-256 as recorded), no "
            f"lease or deletion left; {len(s3.uploads())} multipart upload(s) open")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0, help="how long to go on (default 5)")
    ap.add_argument("--small", type=int, default=12, help="small logs a round (default 12)")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="cryopg-soak-"))
    base.chmod(0o755)
    cluster = Cluster(base / "pg", port=_free_tcp_port(), options=["fsync=off"])
    started, n = time.monotonic(), 0
    try:
        cluster.ensure_initialized()
        cluster.start()
        cluster.create_database("soak")
        dsn = cluster.dsn("soak")
        migrate(dsn)
        work = base / "work"
        work.mkdir()
        s3 = S3Store(work)
        chaos = Chaos(dsn, work)
        try:
            env = chaos.log_store_env(s3, move_after=0, CRYOPG_LOGS_S3_LEASE=LEASE,
                                      CRYOPG_LOGS_S3_OUTAGE_GRACE="600")
            chaos.replica("r1", **dict(env, CRYOPG_LOGS_S3_MOVE_AFTER="60"))
            chaos.replica("r2", **env)
            chaos.replica("r3", **env)
            chaos.agents(3, ["r1"])
            while time.monotonic() - started < args.minutes * 60:
                n += 1
                print(f"soak: round {n}: {_round(chaos, s3, n, args.small, rng)}", flush=True)
        except Exception as exc:
            print(f"soak: round {n} FAILED: {exc}\n{chaos.tail_logs()}", file=sys.stderr)
            return 1
        finally:
            chaos.close()
            s3.close()
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(f"soak: {n} rounds in {(time.monotonic() - started) / 60:.1f} min, all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
