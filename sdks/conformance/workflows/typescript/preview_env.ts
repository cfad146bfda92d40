// Conformance: the preview-environment shape (deploy, park on an event, tear down).
import { stepFn, waitEvent } from "@cryosleep/sdk";

interface PreviewEnv {
  name: string;
  url: string;
}

function deploy(): PreviewEnv {
  console.log("deploying");
  return { name: "pr-7", url: "https://pr-7.preview.test" };
}

function teardown(env: PreviewEnv): boolean {
  console.log(`tearing down ${env.name}`);
  return true;
}

console.log("pass");
const env = await stepFn("deploy", deploy);
console.log(`env=${env.name}`);
const closed = await waitEvent("pr.closed");
console.log("closed=" + JSON.stringify(closed));
await stepFn("teardown", () => teardown(env));
console.log("done");
