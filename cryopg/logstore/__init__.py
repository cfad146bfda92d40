"""Finished runs' logs in an S3-compatible object store (issue 25).

Off unless CRYOPG_LOGS_S3_BUCKET is set: the database then keeps every log, as it always
did. On, PostgreSQL stays the hot tier (live runs' chunks, which every replica's tail
reads and NOTIFY announces), and a mover on each replica sends each finished run's log
to the store as one object: its chunks framed, compressed, sealed under the org's key,
then cryo.archive_run_log drops them from the database. Readers (the log route, the
live stream, graph logs) read a moved log from the store, through any replica.

While the store is down nothing waits on it: runs, claims and finishes never touch it.
A finished run's log waits in the database, bounded: past 4 MiB per run (64 MiB for all
that one replica is moving) the oldest chunks are dropped and a marker line in the log
says how much went (cryo.trim_run_log).
"""
