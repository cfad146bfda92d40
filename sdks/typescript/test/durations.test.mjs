// Durations: milliseconds as a number, or a string as the CLI takes it (issue 17 item 10).
import { test } from "node:test";
import assert from "node:assert/strict";
import * as sdk from "../dist/index.js";

test("a duration is milliseconds or a CLI duration string", () => {
  assert.equal(sdk.toMs(1500), 1500);
  assert.equal(sdk.toMs("1s"), 1000);
  assert.equal(sdk.toMs("500ms"), 500);
  assert.equal(sdk.toMs("5m"), 300000);
  assert.equal(sdk.toMs("1.5h"), 5400000);
  assert.equal(sdk.toMs("10"), 10000);
});

test("a malformed duration string is a ScriptError bad_request", () => {
  for (const bad of ["1x", "-1s", "", "soon"]) {
    assert.throws(() => sdk.toMs(bad), (e) => e instanceof sdk.ScriptError && e.code === "bad_request");
  }
});
