// Conformance: the three failure kinds and the bad inputs, replayed over three passes.
import {
  ScriptError,
  StepFailed,
  WaitTimeout,
  activitySubmit,
  sleep,
  step,
  stepFn,
  stepUnchecked,
  waitSignal,
} from "@cryosleep/sdk";

console.log("pass");
console.log(`unchecked=${(await stepUnchecked("probe", ["sh", "-c", "exit 3"])).exitCode}`);
try {
  await step("fails", ["sh", "-c", "exit 4"]);
} catch (e) {
  if (!(e instanceof StepFailed)) throw e;
  console.log(`step failed exit=${e.exitCode}`);
}
await activitySubmit("dup", ["true"]);
try {
  await activitySubmit("dup", ["true"]);
} catch (e) {
  if (!(e instanceof ScriptError)) throw e;
  console.log(`script error ${e.code}`);
}
try {
  await waitSignal("nudge", { timeoutMs: 500 });
} catch (e) {
  if (!(e instanceof WaitTimeout)) throw e;
  console.log("signal timed out");
}
try {
  await sleep(500);
} catch {
  console.log("swallowed"); // never printed: a parking call does not return on its pass
}
// Last, after every park: a stepFn that failed records nothing, so durable calls after
// it would sit one position earlier on the replay, which strict replay refuses.
try {
  await stepFn("bad", () => new Set([1, 2]));
} catch (e) {
  if (!(e instanceof ScriptError)) throw e;
  console.log(`not json ${e.code}`);
}
console.log("done");
