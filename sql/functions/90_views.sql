-- Views for DBAs. Everything here is ids, statuses, names and times; payloads stay sealed.

CREATE OR REPLACE VIEW cryo.run_overview AS
SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
       r.exit_code, r.error, r.created_at, r.started_at, r.finished_at,
       cryo.now() - r.created_at AS age,
       coalesce(r.finished_at, cryo.now()) - r.started_at AS run_time,
       q.wake_at, q.agent_id
  FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id;
COMMENT ON VIEW cryo.run_overview IS 'One row per run: status, substate, attempt, ages, and its live queue facts.';

CREATE OR REPLACE VIEW cryo.parked_runs AS
SELECT q.run_id, q.org, q.project, q.park_reason AS reason, q.park_path AS waiting_on,
       q.park_name AS waiting_for_name,
       q.parked_at, q.wake_at, q.wake_at - cryo.now() AS wakes_in,
       cryo.now() - q.parked_at AS parked_for
  FROM cryo.queue q WHERE q.state = 'parked';
COMMENT ON VIEW cryo.parked_runs IS 'Runs suspended in the queue: why (reason, the call they wait on) and until when.';

CREATE OR REPLACE VIEW cryo.live_leases AS
SELECT q.run_id, q.org, q.project, q.agent_id, q.claimed_at, q.lease_expires_at,
       q.lease_expires_at - cryo.now() AS expires_in, r.attempt
  FROM cryo.queue q JOIN cryo.runs r ON r.id = q.run_id
 WHERE q.state = 'claimed';
COMMENT ON VIEW cryo.live_leases IS 'Claims held right now: which agent, since when, and when the lease lapses.';

CREATE OR REPLACE VIEW cryo.pending_runs AS
SELECT q.run_id, q.org, q.project, q.required_caps, q.enqueued_at, cryo.now() - q.enqueued_at AS waiting_for
  FROM cryo.queue q WHERE q.state = 'pending';
COMMENT ON VIEW cryo.pending_runs IS 'Runs waiting for an agent, oldest first by enqueued_at.';

CREATE OR REPLACE VIEW cryo.lease_holders AS
SELECT l.org, l.project, l.grp AS concurrency_group, l.holder_run_id, l.kind, l.scoped,
       l.acquired_at, cryo.now() - l.acquired_at AS held_for, r.status AS holder_status,
       (SELECT count(*) FROM cryo.lease_waiters w
         WHERE w.org = l.org AND w.project = l.project AND w.grp = l.grp) AS waiting
  FROM cryo.leases l JOIN cryo.runs r ON r.id = l.holder_run_id;
COMMENT ON VIEW cryo.lease_holders IS 'One row per held concurrency group or lock: the holding run, since when, and how many wait.';

CREATE OR REPLACE VIEW cryo.lease_queues AS
SELECT w.org, w.project, w.grp AS concurrency_group, w.run_id, w.kind,
       row_number() OVER (PARTITION BY w.org, w.project, w.grp ORDER BY w.id) AS position,
       w.enqueued_at, cryo.now() - w.enqueued_at AS waiting_for
  FROM cryo.lease_waiters w;
COMMENT ON VIEW cryo.lease_queues IS 'Runs waiting for a concurrency group or lock, with their FIFO position (1 is next).';
