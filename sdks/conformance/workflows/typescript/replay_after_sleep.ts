// Conformance: a stepFn recorded before a sleep is replayed after it, not run again.
import { sleep, stepFn } from "@cryosleep/sdk";

function compute(): number {
  console.log("computing");
  return 41;
}

console.log("pass");
const value = await stepFn("compute", compute);
console.log(`value=${value}`);
await sleep(1000);
console.log(`after sleep value=${value + 1}`);
