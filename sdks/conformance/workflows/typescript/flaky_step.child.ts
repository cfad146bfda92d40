// Child of flaky_step: stepFn `flaky` throws on the first attempt only.
import { stepFn } from "@cryosleep/sdk";

const attempt = process.env.CRYO_ATTEMPT;

function before(): number {
  console.log("before ran");
  return 1;
}

function flaky(): string {
  console.log("flaky ran");
  if (attempt === "1") throw new Error("flaky failed on the first attempt");
  return "ok";
}

console.log(`attempt ${attempt}`);
const a = await stepFn("before", before);
const b = await stepFn("flaky", flaky);
console.log(`before=${a} flaky=${b}`);
