// Conformance: callGraph and callNode return the child graph's output, once.
import { ScriptError, callGraph, callNode } from "@cryosleep/sdk";

const total = await callGraph("conf-tally", { by: 21 });
console.log(`graph=${total}`);
const node = (await callNode("state", { op: "incr", key: "by-node", entity: "conf-graph", by: 2 })) as {
  value: number;
};
console.log(`node=${node.value}`);
try {
  await callNode("state", { op: "incr", key: "bad", entity: "conf-graph", by: { $expr: "input.by" } }, { by: "lots" });
  console.log("no failure");
} catch (e) {
  if (!(e instanceof ScriptError)) throw e;
  console.log(`failed ${e.code}`);
}
