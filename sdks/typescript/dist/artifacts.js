/**
 * Artifacts: files kept with the run (or cached under a key), moved over the agent
 * socket. The socket's one exception to one JSON line each way: a put's request line
 * says `size` and the file's bytes follow it; a get's reply line says `size` and
 * `sha256` and the bytes follow it. Files move a chunk at a time, and a download
 * replaces its path only once the SHA-256 matched.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, open, rename, stat, unlink } from "node:fs/promises";
import { once } from "node:events";
import { dirname, join } from "node:path";
import { AgentUnavailable, ScriptError } from "./errors.js";
import { connect, socketPath } from "./transport.js";
const CHUNK = 1 << 20;
function lost(op, err) {
    const code = err?.code ?? String(err);
    return new AgentUnavailable(`${op}: lost the agent connection (${code})`);
}
/** The reply line, and the bytes that came after it in the same reads. */
async function replyLine(op, it) {
    let buf = Buffer.alloc(0);
    for (;;) {
        const nl = buf.indexOf(10);
        if (nl >= 0)
            return { reply: decode(op, buf.subarray(0, nl).toString("utf8")), rest: buf.subarray(nl + 1) };
        const next = await it.next();
        if (next.done) {
            if (!buf.toString("utf8").trim()) {
                throw new AgentUnavailable(`${op}: the agent closed the connection without a reply`);
            }
            return { reply: decode(op, buf.toString("utf8")), rest: Buffer.alloc(0) };
        }
        buf = Buffer.concat([buf, next.value]);
    }
}
function decode(op, raw) {
    let reply;
    try {
        reply = JSON.parse(raw);
    }
    catch {
        throw new AgentUnavailable(`${op}: the agent sent a malformed reply`);
    }
    if (reply === null || typeof reply !== "object" || Array.isArray(reply)) {
        throw new AgentUnavailable(`${op}: the agent sent a malformed reply`);
    }
    if (reply.ok === true)
        return reply;
    const err = reply.error ?? {};
    const code = typeof err.code === "string" ? err.code : "bad_request";
    const message = typeof err.message === "string" ? err.message : "the agent refused the request";
    if (code === "engine")
        throw new AgentUnavailable(`${op}: ${message}`);
    throw new ScriptError(code, `${op}: ${message}`);
}
async function write(sock, data) {
    if (!sock.write(data))
        await Promise.race([once(sock, "drain"), once(sock, "close")]);
}
async function session(op, body) {
    const sock = await connect(socketPath(op));
    const it = sock[Symbol.asyncIterator]();
    try {
        return await body(sock, it);
    }
    catch (err) {
        if (err instanceof ScriptError || err instanceof AgentUnavailable)
            throw err;
        throw lost(op, err);
    }
    finally {
        sock.destroy();
    }
}
/** Store the file at `path` as artifact `name` of this run (or the project's cached
 * artifact with `key`); returns its name, sha256 and size. Not journaled: a replay puts
 * the same bytes again, which the store keeps once. */
export async function artifactPut(name, path, options = {}) {
    const op = "artifact.put";
    const { size, mode } = await stat(path);
    // The x bit is kept: a get makes an executable file executable again.
    const executable = (mode & 0o100) !== 0;
    const file = await open(path, "r");
    try {
        return await session(op, async (sock, it) => {
            await write(sock, JSON.stringify({ op, name, key: options.key ?? null, size, ...(options.public ? { public: true } : {}), ...(executable ? { executable: true } : {}) }) + "\n");
            const chunk = Buffer.alloc(CHUNK);
            let left = size;
            while (left > 0) {
                const { bytesRead } = await file.read(chunk, 0, Math.min(CHUNK, left), null);
                if (bytesRead === 0)
                    throw new ScriptError("bad_request", `${op}: ${path} shrank while it was sent`);
                await write(sock, Buffer.from(chunk.subarray(0, bytesRead)));
                left -= bytesRead;
            }
            const { reply } = await replyLine(op, it);
            return reply;
        });
    }
    finally {
        await file.close();
    }
}
/** Fetch artifact `name` (this run's, the cached one with `key`, or run `run`'s) into
 * `path` (default: the name's last part); returns the path written. */
export async function artifactGet(name, path, options = {}) {
    const op = "artifact.get";
    const dest = path ?? name.split("/").pop();
    return session(op, async (sock, it) => {
        await write(sock, JSON.stringify({ op, name, key: options.key ?? null, run: options.run ?? null, ...(options.tainted ? { tainted: true } : {}) }) + "\n");
        const { reply, rest } = await replyLine(op, it);
        await mkdir(dirname(dest) || ".", { recursive: true });
        const tmp = join(dirname(dest) || ".", `.artifact-${randomBytes(6).toString("hex")}`);
        // A new file's mode less the umask, with x where r is for an executable artifact.
        const out = await open(tmp, "wx", reply.executable === true ? 0o777 : 0o666);
        try {
            const digest = createHash("sha256");
            let left = Number(reply.size);
            let chunk = rest;
            for (;;) {
                const take = chunk.subarray(0, left);
                digest.update(take);
                await out.write(take);
                left -= take.length;
                if (left <= 0)
                    break;
                const next = await it.next();
                if (next.done)
                    throw new AgentUnavailable(`${op}: the artifact download stopped short`);
                chunk = next.value;
            }
            await out.close();
            if (digest.digest("hex") !== reply.sha256) {
                throw new AgentUnavailable(`${op}: the artifact's bytes do not match its SHA-256`);
            }
            await rename(tmp, dest);
            return dest;
        }
        catch (err) {
            await out.close().catch(() => { });
            await unlink(tmp).catch(() => { });
            throw err;
        }
    });
}
/** This run's artifacts (or run `run`'s, or with `cached` the project's cached ones). */
export async function artifactList(options = {}) {
    const op = "artifact.list";
    return session(op, async (sock, it) => {
        await write(sock, JSON.stringify({ op, run: options.run ?? null, cached: options.cached ?? false, ...(options.tainted ? { tainted: true } : {}) }) + "\n");
        const { reply } = await replyLine(op, it);
        return Array.isArray(reply.artifacts) ? reply.artifacts : [];
    });
}
