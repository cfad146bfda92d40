// Conformance: a read-modify-write of an entity cell under a lock, by several runs.
import { lock, stateGet, stateSet } from "@cryosleep/sdk";

await lock("conf-tally", async () => {
  const n = (await stateGet<number>("total", { entity: "conf-tally" })) ?? 0;
  await new Promise((resolve) => setTimeout(resolve, 200)); // widen the race a missing lock would lose
  await stateSet("total", n + 1, { entity: "conf-tally" });
});
console.log("done");
