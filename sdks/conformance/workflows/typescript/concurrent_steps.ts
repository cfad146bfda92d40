// Conformance: six stepFn calls awaited together (Promise.all) replay by identity.
import { sleep, stepFn } from "@cryosleep/sdk";

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

console.log("pass");
const values = await Promise.all(
  [1, 2, 3, 4, 5, 6].map((i) =>
    stepFn(`p${i}`, async () => {
      await pause((7 - i) * 100); // the last started finishes first
      return i;
    }),
  ),
);
const sum = values.reduce((a, b) => a + b, 0);
console.log(`sum=${sum}`);
await sleep(1000);
console.log(`after sleep sum=${sum}`);
