// Conformance: fan-out of activities, one retried on exit 75.
import { activityCollect, activitySubmit, activityWaitAll } from "@cryosleep/sdk";

for (const i of [1, 2, 3]) {
  await activitySubmit(`job-${i}`, ["sh", "-c", `echo out-${i}`]);
}
await activitySubmit(
  "flaky",
  ["sh", "-c", 'if [ "$CRYO_ATTEMPT" -ge 2 ]; then echo "flaky-ok attempt $CRYO_ATTEMPT"; else exit 75; fi'],
  { retries: 2, retryBackoffMs: 200, retryOnExit: [75] },
);
const flaky = await activityCollect("flaky");
const failed = await activityWaitAll();
const first = await activityCollect("job-1");
// Printed only once every wait has been answered, so the log is the same however many
// passes the waits took.
console.log(`flaky=${flaky.trim()}`);
console.log(`failed=${failed}`);
console.log(`job-1=${first.trim()}`);
