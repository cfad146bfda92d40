// Replays sdks/conformance/vectors/*.json against a fake agent socket (see the README
// there): each case makes one SDK call and checks the exact requests and the outcome.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as sdk from "../dist/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const vectorsDir = process.env.CRYO_CONFORMANCE_VECTORS ?? join(here, "..", "..", "conformance", "vectors");

class UserError extends Error {}

function normalise(value, jsonFields = []) {
  const out = structuredClone(value);
  for (const f of jsonFields) {
    if (out && typeof out[f] === "string") out[f] = JSON.parse(out[f]);
  }
  return out;
}

/** A fake agent: one connection per expected exchange, in order. */
function fakeAgent(path, exchanges) {
  const seen = [];
  const problems = [];
  let next = 0;
  const server = createServer((sock) => {
    let buf = "";
    sock.on("data", (chunk) => {
      buf += chunk.toString("utf8");
      const nl = buf.indexOf("\n");
      if (nl < 0) return;
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      let req;
      try {
        req = JSON.parse(line);
      } catch {
        problems.push(`request is not JSON: ${line}`);
        return sock.destroy();
      }
      seen.push(req);
      const ex = exchanges[next++];
      if (!ex) {
        problems.push(`unexpected request ${line}`);
        return sock.destroy();
      }
      try {
        assert.deepEqual(normalise(req, ex.json_fields), normalise(ex.request, ex.json_fields));
      } catch (e) {
        problems.push(`request #${next} differs: ${e.message}`);
      }
      if (ex.reply_raw !== undefined) sock.end(ex.reply_raw);
      else if (ex.reply === null) sock.end();
      else sock.end(JSON.stringify(ex.reply) + "\n");
    });
    sock.on("error", () => {});
  });
  return new Promise((resolve) => {
    server.listen(path, () => resolve({ server, seen, problems, count: () => next }));
  });
}

function unencodable() {
  return 10n; // a BigInt has no JSON form
}

/** A step's argv; with `script`, that file written (executable) and its path first. */
function stepArgv(c, dir) {
  if (!c.script) return c.argv;
  const path = join(dir, c.script.file);
  writeFileSync(path, c.script.source, { mode: 0o755 });
  return [path, ...c.argv];
}

async function makeCall(c, state, dir) {
  const opt = (o) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
  switch (c.verb) {
    case "step_fn":
      return sdk.stepFn(
        c.name,
        () => {
          state.fnCalls++;
          if (c.raises !== undefined) throw new UserError(c.raises);
          if (c.returns_unencodable) return { bad: unencodable() };
          return c.returns;
        },
        opt({ label: c.label }),
      );
    case "step":
      return sdk.step(c.name, stepArgv(c, dir), opt({ label: c.label }));
    case "step_unchecked": {
      const r = await sdk.stepUnchecked(c.name, stepArgv(c, dir), opt({ label: c.label }));
      return { exit_code: r.exitCode, stdout: r.stdout };
    }
    case "sleep":
      return sdk.sleep(c.seconds * 1000);
    case "wait_signal":
    case "wait_event": {
      const fn = c.verb === "wait_signal" ? sdk.waitSignal : sdk.waitEvent;
      return c.timeout === undefined ? fn(c.name) : fn(c.name, { timeoutMs: c.timeout * 1000 });
    }
    case "emit":
      if (c.payload_unencodable) return sdk.emit(c.name, unencodable());
      return c.payload === undefined ? sdk.emit(c.name) : sdk.emit(c.name, c.payload);
    case "call_graph":
      if (c.input_unencodable) return sdk.callGraph(c.name, unencodable());
      return c.input === undefined ? sdk.callGraph(c.name) : sdk.callGraph(c.name, c.input);
    case "call_node":
      return c.input === undefined
        ? sdk.callNode(c.type, c.config)
        : sdk.callNode(c.type, c.config, c.input);
    case "spawn": {
      const path = join(dir, c.file);
      writeFileSync(path, c.source);
      return sdk.spawn(path, opt({ input: c.input, interpreter: c.interpreter }));
    }
    case "annotate":
      return sdk.annotate(c.text);
    case "output_set":
      return sdk.setOutput(c.key, c.value);
    case "state_get":
      return sdk.stateGet(c.key, opt({ entity: c.entity }));
    case "state_cell":
      return sdk.stateCell(c.key, opt({ entity: c.entity }));
    case "state_set":
      return sdk.stateSet(c.key, c.value_unencodable ? unencodable() : c.value, opt({ entity: c.entity }));
    case "state_delete":
      return sdk.stateDelete(c.key, opt({ entity: c.entity }));
    case "state_list":
      return sdk.stateList(opt({ entity: c.entity }));
    case "state_add":
      return sdk.stateAdd(c.key, opt({ entity: c.entity, value: c.value }));
    case "state_cas":
      return sdk.stateCas(c.key, c.value, c.expect, opt({ entity: c.entity, as: c.as }));
    case "state_incr":
      return sdk.stateIncr(c.key, opt({ entity: c.entity, by: c.by, as: c.as }));
    case "activity_submit":
    case "activity": {
      const options = opt({
        retries: c.retries,
        retryBackoffMs: c.retry_backoff === undefined ? undefined : c.retry_backoff * 1000,
        retryOnExit: c.retry_on_exit,
      });
      return (c.verb === "activity" ? sdk.activity : sdk.activitySubmit)(c.name, c.argv, options);
    }
    case "activity_collect":
      return sdk.activityCollect(c.name);
    case "activity_wait_all":
      return sdk.activityWaitAll();
    case "lock":
      return sdk.lock(c.group, async () => {
        state.fnCalls++;
        for (const inner of c.body) await makeCall(inner, state, dir);
        if (c.body_raises) throw new UserError("body failed");
      });
    case "sequence": {
      const results = [];
      for (const inner of c.calls) results.push(await makeCall(inner, state, dir));
      return results;
    }
    default:
      throw new Error(`unknown verb ${c.verb}`);
  }
}

function checkOutcome(result, outcome) {
  if ("value" in result) {
    assert.ok(!("error" in outcome), `expected ${result.value === null ? "null" : "a value"}, got ${outcome.error}`);
    assert.deepEqual(outcome.value === undefined ? null : JSON.parse(JSON.stringify(outcome.value)), result.value);
    return;
  }
  const err = outcome.error;
  assert.ok(err !== undefined, `expected ${result.error}, got the value ${JSON.stringify(outcome.value)}`);
  const classes = {
    StepFailed: sdk.StepFailed,
    ScriptError: sdk.ScriptError,
    AgentUnavailable: sdk.AgentUnavailable,
    WaitTimeout: sdk.WaitTimeout,
    FunctionError: UserError,
  };
  assert.ok(err instanceof classes[result.error], `expected ${result.error}, got ${err?.name}: ${err?.message}`);
  if (result.code !== undefined) assert.equal(err.code, result.code);
  if (result.exit_code !== undefined) assert.equal(err.exitCode, result.exit_code);
  for (const s of result.message_contains ?? []) assert.ok(err.message.includes(s), `${JSON.stringify(s)} not in ${JSON.stringify(err.message)}`);
}

const files = readdirSync(vectorsDir).filter((f) => f.endsWith(".json")).sort();
for (const file of files) {
  const { cases } = JSON.parse(readFileSync(join(vectorsDir, file), "utf8"));
  for (const c of cases) {
    test(`${file.replace(/\.json$/, "")}: ${c.id}`, async () => {
      const dir = mkdtempSync(join(tmpdir(), "cryo-ts-"));
      const path = join(dir, "agent.sock");
      const saved = { ...process.env };
      sdk.resetAgentCache();
      let agent;
      try {
        process.env.CRYO_SOCKET = c.server === "absent" ? join(dir, "nobody.sock") : path;
        for (const [k, v] of Object.entries(c.env ?? {})) {
          if (v === null) delete process.env[k];
          else process.env[k] = v;
        }
        if (c.server !== "absent") agent = await fakeAgent(path, c.exchanges);
        const state = { fnCalls: 0 };
        const outcome = {};
        try {
          outcome.value = await makeCall(c.call, state, dir);
        } catch (e) {
          outcome.error = e;
        }
        checkOutcome(c.result, outcome);
        if (agent) {
          assert.deepEqual(agent.problems, []);
          assert.equal(agent.count(), c.exchanges.length, "number of requests");
        }
        if (c.fn_calls !== undefined) assert.equal(state.fnCalls, c.fn_calls, "function calls");
      } finally {
        for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
        Object.assign(process.env, saved);
        if (agent) await new Promise((r) => agent.server.close(r));
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
}
