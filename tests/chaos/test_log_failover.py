"""An agent's log under replica kills (issue 36): agents given two replicas' URLs stream
numbered lines while the replica they talk to is killed again and again; every finished
run's log then reads back exactly as printed (no line twice, none missing) from every
replica.

To make a kill land between a log post's commit and its answer (the case that doubled
bytes: the agent posts the same bytes again to the other replica), the test database
sleeps a moment inside every log insert. The statement still commits after its replica
is killed (PostgreSQL notices a vanished client only when it next writes to it), so
nearly every kill strands a committed post whose answer never arrives.
"""

from __future__ import annotations

from typing import Any

import psycopg

from tests.chaos.conftest import Chaos
from tests.e2e.helpers import wait_for

RUNS = 6
LINES = 40
KILLS = 4
# Each post spends this long in the database before its commit.
SLOW_INSERT = """
CREATE FUNCTION public.slow_log_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(0.25);
    RETURN NULL;
END $$;
CREATE TRIGGER slow_log_insert AFTER INSERT ON cryo.logs
    FOR EACH ROW EXECUTE FUNCTION public.slow_log_insert();
"""


def _script(tag: str) -> str:
    # -onlcr: the PTY passes "\n" as is, so the log is exactly what the script prints.
    return (f"stty -onlcr; for i in $(seq 1 {LINES}); do echo {tag}-$i; sleep 0.1; done\n")


def _expected(tag: str) -> bytes:
    return "".join(f"{tag}-{i}\n" for i in range(1, LINES + 1)).encode()


def _sql(chaos: Chaos, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(chaos.dsn, autocommit=True) as db:
        return db.execute(query, params).fetchall()


def _agents_on(chaos: Chaos, n: int, replicas: list[str]) -> None:
    """n agents, each given every replica's URL (`--url a,b`), first to last."""
    urls = ",".join(chaos.url(r) for r in replicas)
    for _ in range(n):
        name = f"agent-{len(chaos.agent_procs)}"
        chaos.agent_procs[name] = chaos._spawn(
            name, ["agent", "--url", urls, "--token", chaos.agent_token, "--id", name],
            chaos.env)


def _ended(chaos: Chaos, runs: list[str]) -> int:
    return int(_sql(chaos, "SELECT count(*) FROM cryo.runs WHERE id = ANY (%s) "
                           "AND cryo.is_terminal(status)", (runs,))[0][0])


def _logged(chaos: Chaos, runs: list[str]) -> int:
    return int(_sql(chaos, "SELECT count(*) FROM cryo.logs WHERE run_id = ANY (%s)",
                    (runs,))[0][0])


def test_replica_kills_neither_double_nor_drop_log_bytes(chaos: Chaos) -> None:
    for name in ("r1", "r2"):
        chaos.replica(name, claim_seconds=20)
    with psycopg.connect(chaos.dsn, autocommit=True) as db:
        db.execute(SLOW_INSERT)
    _agents_on(chaos, 3, ["r1", "r2"])
    want = {chaos.submit("r1", _script(f"job{i}")): _expected(f"job{i}") for i in range(RUNS)}
    runs = list(want)
    # Kill r1 and r2 in turn (the other always up, so agents fail over to it), each
    # kill once the runs have stored more log since the last one.
    victim, seen = "r1", 0
    for _ in range(KILLS):
        if _ended(chaos, runs) == len(runs):
            break
        at_least = seen + RUNS
        seen = wait_for("more log to be stored", lambda n=at_least: (
            got if (got := _logged(chaos, runs)) >= n or _ended(chaos, runs) == len(runs)
            else None), timeout=30)
        chaos.kill(victim)
        wait_for("a post to move to the other replica",
                 lambda n=seen: _logged(chaos, runs) > n or _ended(chaos, runs) == len(runs),
                 timeout=30)
        chaos.restart(victim)
        victim = "r2" if victim == "r1" else "r1"
    wait_for("every run to end", lambda: _ended(chaos, runs) == len(runs), timeout=60,
             every=0.3)
    statuses = _sql(chaos, "SELECT id, status FROM cryo.runs WHERE id = ANY (%s)", (runs,))
    assert {s for _, s in statuses} == {"succeeded"}, statuses
    bad = {(r, name): got for r in runs for name in chaos.live()
           if (got := chaos.raw(name, f"/runs/{r}/logs")) != (200, want[r])}
    assert bad == {}, chaos.tail_logs()
