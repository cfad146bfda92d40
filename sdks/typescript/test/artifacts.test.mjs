// artifactPut/Get/List against a fake agent that speaks the socket's byte framing: a
// put's line announces `size` and the bytes follow; a get's reply line announces `size`
// and `sha256` and the bytes follow it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as sdk from "../dist/index.js";

const sha = (b) => createHash("sha256").update(b).digest("hex");

/** Answers each connection with `handle(request line, bytes after it)`. */
async function withAgent(handle, body) {
  const dir = mkdtempSync(join(tmpdir(), "cryo-art-"));
  const path = join(dir, "agent.sock");
  const seen = [];
  const server = createServer((sock) => {
    let buf = Buffer.alloc(0);
    let req = null;
    sock.on("data", (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      if (req === null) {
        const nl = buf.indexOf(10);
        if (nl < 0) return;
        req = JSON.parse(buf.subarray(0, nl).toString("utf8"));
        buf = buf.subarray(nl + 1);
      }
      const want = req.op === "artifact.put" ? req.size : 0;
      if (buf.length < want) return;
      seen.push({ ...req, bytes: buf });
      sock.end(handle(req, buf));
    });
    sock.on("error", () => {});
  });
  await new Promise((r) => server.listen(path, r));
  const saved = process.env.CRYO_SOCKET;
  process.env.CRYO_SOCKET = path;
  try {
    await body(dir, seen);
  } finally {
    process.env.CRYO_SOCKET = saved;
    await new Promise((r) => server.close(r));
    rmSync(dir, { recursive: true, force: true });
  }
}

const line = (obj) => JSON.stringify(obj) + "\n";
const DATA = Buffer.concat([Buffer.alloc(3 << 20, 7), Buffer.from("end")]);

test("put sends the line, then the bytes", async () => {
  await withAgent(
    (req, bytes) => line({ ok: true, name: req.name, sha256: sha(bytes), size: bytes.length }),
    async (dir, seen) => {
      const file = join(dir, "data.bin");
      writeFileSync(file, DATA);
      const got = await sdk.artifactPut("dist/data", file, { key: "lock-1" });
      assert.deepEqual(got, { ok: true, name: "dist/data", sha256: sha(DATA), size: DATA.length });
      assert.equal(seen.length, 1);
      const { bytes, ...req } = seen[0];
      assert.deepEqual(req, { op: "artifact.put", name: "dist/data", key: "lock-1", size: DATA.length });
      assert.ok(bytes.equals(DATA));
    },
  );
});

test("get writes the bytes after the reply line, only once they match", async () => {
  let sent = DATA;
  await withAgent(
    () => Buffer.concat([Buffer.from(line({ ok: true, size: DATA.length, sha256: sha(DATA) })), sent]),
    async (dir, seen) => {
      const dest = join(dir, "out", "copy.bin");
      assert.equal(await sdk.artifactGet("data", dest, { run: "dev:default:run-1" }), dest);
      assert.ok(readFileSync(dest).equals(DATA));
      const { bytes, ...req } = seen[0];
      assert.deepEqual(req, { op: "artifact.get", name: "data", key: null, run: "dev:default:run-1" });
      sent = Buffer.concat([DATA.subarray(1), Buffer.from("x")]); // same size, other bytes
      const other = join(dir, "other.bin");
      await assert.rejects(sdk.artifactGet("data", other), sdk.AgentUnavailable);
      assert.ok(!existsSync(other));
      sent = DATA.subarray(10); // stops short
      await assert.rejects(sdk.artifactGet("data", other), /stopped short/);
      assert.deepEqual(readdirSync(dir).filter((n) => n.startsWith(".artifact-")), []);
    },
  );
});

test("a refusal is a ScriptError with the agent's code; list returns the rows", async () => {
  await withAgent(
    (req) =>
      req.op === "artifact.list"
        ? line({ ok: true, artifacts: [{ name: "a", sha256: sha("a"), size: 1 }] })
        : line({ ok: false, error: { code: "artifact_quota", message: "over the bound" } }),
    async (dir, seen) => {
      const file = join(dir, "a");
      writeFileSync(file, "a");
      await assert.rejects(sdk.artifactPut("a", file), (e) => e instanceof sdk.ScriptError && e.code === "artifact_quota");
      assert.deepEqual(await sdk.artifactList({ cached: true }), [{ name: "a", sha256: sha("a"), size: 1 }]);
      assert.deepEqual({ ...seen[1], bytes: undefined }, { op: "artifact.list", run: null, cached: true, bytes: undefined });
    },
  );
});
