/**
 * One request per connection to the agent socket (`$CRYO_SOCKET`): connect, write one
 * JSON line, read one JSON line. Only the connect is retried; a request that reached
 * the wire is never sent again, because replay is what re-runs a step.
 */
import { createConnection, type Socket } from "node:net";
import { AgentUnavailable, ScriptError } from "./errors.js";

export type Request = { op: string } & Record<string, unknown>;
export type Reply = { ok: boolean } & Record<string, any>;

/** Ops after which the agent may park the run: it stops the script and never answers. */
const PARKING = new Set([
  "sleep",
  "wait.signal",
  "wait.event",
  "activity.collect",
  "activity.wait-all",
  "lock.acquire",
  "graph.call",
  "node.call",
]);
const TRANSIENT = new Set(["ECONNREFUSED", "EAGAIN"]);

function intEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || !/^\s*\d+\s*$/.test(raw)) return fallback;
  return Number.parseInt(raw, 10);
}

export function socketPath(op: string): string {
  const path = process.env.CRYO_SOCKET;
  if (!path) {
    throw new ScriptError(
      "outside_run",
      `${op}: not inside a cryopg run (CRYO_SOCKET is not set); submit the script with ` +
        "`cryopg submit` or run it under `cryopg dev`",
    );
  }
  return path;
}

function openOnce(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const sock = createConnection({ path });
    const onError = (err: Error) => reject(err);
    sock.once("error", onError);
    sock.once("connect", () => {
      sock.off("error", onError);
      resolve(sock);
    });
  });
}

export async function connect(path: string): Promise<Socket> {
  const attempts = Math.max(1, intEnv("CRYO_CONNECT_ATTEMPTS", 3));
  const backoff = intEnv("CRYO_CONNECT_BACKOFF_MS", 50);
  for (let attempt = 0; ; attempt++) {
    try {
      return await openOnce(path);
    } catch (err: any) {
      const code = String(err?.code ?? "");
      if (!TRANSIENT.has(code) || attempt + 1 >= attempts) {
        throw new AgentUnavailable(`cannot reach the agent at ${path} (${code || err})`);
      }
      await new Promise((r) => setTimeout(r, backoff * 2 ** attempt));
    }
  }
}

function exchange(sock: Socket, req: Request, line: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let settled = false;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      sock.destroy();
      fn();
    };
    sock.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      const text = Buffer.concat(chunks).toString("utf8");
      const nl = text.indexOf("\n");
      if (nl >= 0) finish(() => decode(req, text.slice(0, nl), resolve, reject));
    });
    sock.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      if (text.trim()) return finish(() => decode(req, text, resolve, reject));
      finish(() => {
        if (!PARKING.has(req.op)) {
          return reject(new AgentUnavailable(`${req.op}: the agent closed the connection without a reply`));
        }
        // The agent parked the run and is stopping this process: never return. If we
        // are still alive after the grace period the agent went away instead.
        const grace = intEnv("CRYO_SUSPEND_GRACE_MS", 5000);
        setTimeout(
          () =>
            reject(
              new AgentUnavailable(
                `${req.op}: the agent closed the connection without a reply and did not stop the script`,
              ),
            ),
          grace,
        );
      });
    });
    sock.on("error", (err: any) =>
      finish(() =>
        reject(new AgentUnavailable(`${req.op}: lost the agent connection (${err?.code ?? err})`)),
      ),
    );
    sock.write(line);
  });
}

function decode(
  req: Request,
  raw: string,
  resolve: (r: Reply) => void,
  reject: (e: Error) => void,
): void {
  let reply: unknown;
  try {
    reply = JSON.parse(raw);
  } catch {
    return reject(new AgentUnavailable(`${req.op}: the agent sent a malformed reply`));
  }
  if (reply === null || typeof reply !== "object" || Array.isArray(reply)) {
    return reject(new AgentUnavailable(`${req.op}: the agent sent a malformed reply`));
  }
  const r = reply as Reply;
  if (r.ok === true) return resolve(r);
  const err = r.error ?? {};
  const code = typeof err.code === "string" ? err.code : "bad_request";
  const message = typeof err.message === "string" ? err.message : "the agent refused the request";
  if (code === "engine") {
    // The server behind the agent refused or is unreachable, or this pass is ending.
    return reject(new AgentUnavailable(`${req.op}: ${message}`));
  }
  reject(new ScriptError(code, `${req.op}: ${message}`));
}

/** Send one request and return its reply; raise the matching error kind otherwise. */
export async function call(req: Request): Promise<Reply> {
  const path = socketPath(req.op);
  const line = JSON.stringify(req) + "\n";
  const sock = await connect(path);
  return exchange(sock, req, line);
}

let advertised: Promise<Set<string>> | undefined;

/** The agent's verbs, asked once per process (`hello`). */
export function agentVerbs(): Promise<Set<string>> {
  if (!advertised) {
    advertised = call({ op: "hello" }).then((r) => new Set(Array.isArray(r.verbs) ? r.verbs : []));
    advertised.catch(() => {
      advertised = undefined;
    });
  }
  return advertised;
}

/** Fail at the call site when the agent does not advertise `verb`. */
export async function requireVerb(verb: string, what: string): Promise<void> {
  const verbs = await agentVerbs();
  if (!verbs.has(verb)) {
    throw new ScriptError(
      "unsupported_verb",
      `${what} needs an agent that offers ${verb}, and this agent does not list it: ` +
        "upgrade the agent",
    );
  }
}

/** Forget what the agent advertised (tests run several fake agents in one process). */
export function resetAgentCache(): void {
  advertised = undefined;
}
