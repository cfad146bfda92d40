// Conformance: a failing stepFn is re-run on the next attempt (the child's retry).
import { join } from "node:path";
import { activity, input } from "@cryosleep/sdk";

const given = input<{ dir: string; child_argv: string[] }>();
const child = join(given.dir, "flaky_step.child.ts");
const out = await activity("flaky", [...given.child_argv, child], { retries: 1, retryBackoffMs: 200 });
process.stdout.write(out);
console.log("collected");
