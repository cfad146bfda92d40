/**
 * @cryosleep/sdk: durable workflows for cryopg, spoken over the agent socket.
 *
 * Every export is a durable verb. Inside a run each call either answers from the run's
 * journal (a replay) or asks the agent, which records the answer before replying. Calls
 * that wait (sleep, waits, activityCollect, activityWaitAll, lock) may instead park the
 * run: the agent stops this process and the script runs again from the top later.
 */
import { spawn as spawnChild } from "node:child_process";
import { closeSync, openSync, readFileSync, readSync } from "node:fs";
import { basename, join } from "node:path";
import { constants } from "node:os";
import { AgentUnavailable, ScriptError, StepFailed, WaitTimeout } from "./errors.js";
import { checkJson, encodeJson } from "./json.js";
import { agentVerbs, call, requireVerb, resetAgentCache } from "./transport.js";

export { AgentUnavailable, ScriptError, StepFailed, WaitTimeout, agentVerbs, resetAgentCache };
export {
  artifactGet,
  artifactList,
  artifactPut,
  type ArtifactGetOptions,
  type ArtifactInfo,
  type ArtifactListOptions,
  type ArtifactPutOptions,
} from "./artifacts.js";

/** A JSON value as it comes back from the journal. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface StepOptions {
  /** Shown in the run view beside the step name (e.g. which host an iteration was for). */
  label?: string;
}

export interface CommandOptions extends StepOptions {
  /** Project secrets the command needs; the run fails if one is withheld or unset. */
  secrets?: string[];
}

export interface StepResult {
  stdout: string;
  exitCode: number;
}

/**
 * A duration: milliseconds as a number, or a string as the CLI takes it, a number with
 * an optional unit ms, s, m, h or d ("30s", "5m", "1.5h", "500ms"; a bare "10" is seconds).
 */
export type Duration = number | string;

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A {@link Duration} in milliseconds; a malformed string is a ScriptError bad_request. */
export function toMs(value: Duration, what = "duration"): number {
  if (typeof value === "number") return value; // checked by the agent
  if (typeof value === "string") {
    const raw = value.trim().toLowerCase();
    const unit = ["ms", "s", "m", "h", "d"].find((u) => raw.endsWith(u)) ?? "";
    const number = raw.slice(0, raw.length - unit.length).trim();
    if (/^(\d+\.?\d*|\.\d+)$/.test(number)) return Number(number) * UNITS[unit || "s"];
  }
  throw new ScriptError(
    "bad_request",
    `${what} must be milliseconds or a duration like 30s, 5m, 1.5h, 500ms; got ${JSON.stringify(value)}`,
  );
}

export interface WaitOptions {
  /** Give up after this long (milliseconds, or "30s") by raising {@link WaitTimeout}. */
  timeoutMs?: Duration;
}

export interface WaitEventOptions extends WaitOptions {
  /** A trusted run also hears untrusted runs' events of the name (docs/security/trust.md). */
  tainted?: boolean;
}

export interface EmitOptions {
  /** A trusted run's event reaches untrusted runs waiting on the name too. */
  public?: boolean;
}

export interface ActivityOptions {
  /** Further attempts after a failed one. */
  retries?: number;
  /** Wait between attempts, in milliseconds. */
  retryBackoffMs?: Duration;
  /** Only these exit codes earn a retry (default: any non-zero). */
  retryOnExit?: number[];
}

export interface SpawnOptions {
  /** The child's source; read from `filename` when omitted. */
  source?: string;
  /** The child's input (any JSON). */
  input?: unknown;
  /** The interpreter, when the extension does not say. */
  interpreter?: string;
}

export interface StateOptions {
  /** The project-wide entity scope the cell lives in; omit for this run's own scope. */
  entity?: string;
}

export interface StateReadOptions extends StateOptions {
  /** A trusted run reads the cell untrusted runs wrote instead (docs/security/trust.md). */
  tainted?: boolean;
}

export interface StateSetOptions extends StateOptions {
  /** A trusted run's write of an entity cell lets untrusted runs read it. */
  public?: boolean;
}

/** Trust opt-ins go on the wire only when set, so other requests stay as they were. */
function flag(name: "tainted" | "public", on: boolean | undefined): Record<string, boolean> {
  return on ? { [name]: true } : {};
}

export interface StateCell<T = Json> {
  key: string;
  value: T;
  version: number;
}

export interface CellValue<T = Json> {
  value: T;
  version: number;
}

/**
 * Run `fn` once and record its result; on every replay return the recorded result
 * without calling `fn`. Only a success is recorded: if `fn` throws, nothing is, and the
 * step runs again on the next attempt. The result must round-trip through JSON.
 */
export async function stepFn<T>(
  name: string,
  fn: () => T | Promise<T>,
  options: StepOptions = {},
): Promise<T> {
  const begin = await call({ op: "step.begin", name, label: options.label ?? null });
  if (begin.hit) {
    const exitCode = Number(begin.exit_code ?? 0);
    if (exitCode !== 0) throw new StepFailed(name, exitCode, String(begin.stdout ?? ""));
    return decodeRecorded(name, begin.stdout) as T;
  }
  const value = await fn();
  const text = encodeJson(value, `stepFn ${JSON.stringify(name)} result`);
  await call({ op: "step.finish", call_id: begin.call_id, stdout: text, exit_code: 0 });
  return JSON.parse(text) as T;
}

function decodeRecorded(name: string, stdout: unknown): unknown {
  try {
    return JSON.parse(String(stdout ?? ""));
  } catch {
    throw new ScriptError(
      "not_json",
      `stepFn ${JSON.stringify(name)}: the recorded result is not JSON (was the name used by a command step?)`,
    );
  }
}

/**
 * Run a command as a durable step and return its stdout. A non-zero exit is recorded
 * too, and raises {@link StepFailed} on this pass and every replay.
 */
export async function step(name: string, argv: string[], options: CommandOptions = {}): Promise<string> {
  const result = await stepUnchecked(name, argv, options);
  if (result.exitCode !== 0) throw new StepFailed(name, result.exitCode, result.stdout);
  return result.stdout;
}

/** {@link step} that hands back the exit code instead of raising on a non-zero one. */
export async function stepUnchecked(
  name: string,
  argv: string[],
  options: CommandOptions = {},
): Promise<StepResult> {
  if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === "string")) {
    throw new ScriptError("bad_request", `step ${JSON.stringify(name)} needs a non-empty argv of strings`);
  }
  const req: Record<string, unknown> = { name, label: options.label ?? null };
  if (options.secrets?.length) req.secrets = options.secrets;
  const begin = await call({ op: "step.begin", ...req });
  if (begin.hit) return { stdout: String(begin.stdout ?? ""), exitCode: Number(begin.exit_code ?? 0) };
  const ran = await runCommand(argv, String(begin.idempotency_key ?? ""));
  await call({ op: "step.finish", call_id: begin.call_id, stdout: ran.stdout, exit_code: ran.exitCode });
  return ran;
}

async function runCommand(argv: string[], key: string): Promise<StepResult> {
  // The command gets no agent handles (a nested verb must fail loudly), only its key.
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith("CRYO_") && v !== undefined) env[k] = v;
  }
  env.CRYO_IDEMPOTENCY_KEY = key;
  const ran = await spawnCommand(argv, env);
  // A script without a `#!` line: /bin/sh reads it, as a shell (or execvp) would. (Node
  // on Linux spawns through execvp, which does so itself; posix_spawn elsewhere does not.)
  const script = ran.errno === "ENOEXEC" ? shellScript(argv, env) : undefined;
  const result = script ? await spawnCommand(script, env) : ran;
  if (result.errno) process.stderr.write(`cryosleep step: cannot run ${argv[0]} (${result.errno})\n`);
  return { stdout: result.stdout, exitCode: result.exitCode };
}

/** ["/bin/sh", path, ...args] for a text file (no NUL in its first line, bash's test); none
 * for anything else, which stays an exec format error (127). */
function shellScript(argv: string[], env: Record<string, string>): string[] | undefined {
  const name = argv[0]!;
  const dirs = name.includes("/") ? [""] : (env.PATH ?? "").split(":");
  for (const dir of dirs) {
    const path = dir ? join(dir, name) : name;
    const head = Buffer.alloc(256);
    let n: number;
    try {
      const fd = openSync(path, "r");
      try {
        n = readSync(fd, head, 0, head.length, 0);
      } finally {
        closeSync(fd);
      }
    } catch {
      continue;
    }
    const end = head.subarray(0, n).indexOf(10);
    const line = head.subarray(0, end < 0 ? n : end);
    return line.includes(0) ? undefined : ["/bin/sh", path, ...argv.slice(1)];
  }
  return undefined;
}

function spawnCommand(
  argv: string[],
  env: Record<string, string>,
): Promise<StepResult & { errno?: string }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let child;
    try {
      child = spawnChild(argv[0]!, argv.slice(1), { env, stdio: ["inherit", "pipe", "inherit"] });
    } catch (err: any) {
      const errno = String(err?.code ?? err);
      return resolve({ stdout: "", exitCode: errno === "EACCES" ? 126 : 127, errno });
    }
    child.stdout!.on("data", (c: Buffer) => chunks.push(c));
    child.on("error", (err: any) => {
      const errno = String(err?.code ?? err);
      resolve({ stdout: "", exitCode: errno === "EACCES" ? 126 : 127, errno });
    });
    child.on("close", (code, signal) => {
      const signo = signal ? (constants.signals as Record<string, number>)[signal] ?? 0 : 0;
      resolve({
        stdout: Buffer.concat(chunks).toString("utf8"),
        exitCode: code ?? 128 + signo,
      });
    });
  });
}

/** Park the run for `duration` (milliseconds, or "5m"); the agent is freed meanwhile. */
export async function sleep(duration: Duration): Promise<void> {
  await call({ op: "sleep", seconds: toMs(duration, "sleep") / 1000 });
}

async function wait(kind: "signal" | "event", name: string, options: WaitEventOptions): Promise<any> {
  const op = `wait.${kind}`;
  const what = kind === "signal" ? "waitSignal" : "waitEvent";
  const extra = flag("tainted", options.tainted);
  const ms = options.timeoutMs === undefined ? undefined : toMs(options.timeoutMs, "timeoutMs");
  if (ms === undefined) {
    const reply = await call({ op, name, timeout: null, ...extra });
    return reply.payload ?? null;
  }
  await requireVerb(op, `${what} with a timeout`);
  const reply = await call({ op, name, timeout: ms / 1000, ...extra });
  if (reply.timed_out) throw new WaitTimeout(kind, name, ms);
  return reply.payload ?? null;
}

/**
 * Park until the named signal arrives (`cryopg signal RUN NAME`) and return its payload.
 * With `timeoutMs`, raise {@link WaitTimeout} when none arrived in time.
 */
export function waitSignal<T = Json>(name: string, options: WaitOptions = {}): Promise<T> {
  return wait("signal", name, { timeoutMs: options.timeoutMs });
}

/**
 * Park until a project bus event of this name is published after the wait began, and
 * return its payload. With `timeoutMs`, raise {@link WaitTimeout} when none arrived.
 * A trusted run hears untrusted runs' events only with `tainted: true`; an untrusted run
 * hears those and published ones.
 */
export function waitEvent<T = Json>(name: string, options: WaitEventOptions = {}): Promise<T> {
  return wait("event", name, options);
}

/** Publish an event on the project bus (recorded: a replay does not publish again).
 * With `public: true` a trusted run's event reaches untrusted runs waiting on it too. */
export async function emit(name: string, payload: unknown = null, options: EmitOptions = {}): Promise<void> {
  checkJson(payload, `emit ${JSON.stringify(name)} payload`);
  await call({ op: "emit", name, payload, ...flag("public", options.public) });
}

/** Start a child workflow run; returns its run id (recorded by call order). */
export async function spawn(filename: string, options: SpawnOptions = {}): Promise<string> {
  const source = options.source ?? readFileSync(filename, "utf8");
  checkJson(options.input ?? null, `spawn ${JSON.stringify(filename)} input`);
  const reply = await call({
    op: "spawn",
    filename: basename(filename),
    source,
    input: options.input ?? null,
    interpreter: options.interpreter ?? null,
  });
  return String(reply.run_id);
}

/** Submit an activity (a child run of `argv`) under a name unique in this run. */
export async function activitySubmit(
  name: string,
  argv: string[],
  options: ActivityOptions = {},
): Promise<string> {
  const req: Record<string, unknown> = { name, argv };
  if (options.retries !== undefined) req.retries = options.retries;
  if (options.retryBackoffMs !== undefined) req.retry_backoff = toMs(options.retryBackoffMs, "retryBackoffMs") / 1000;
  if (options.retryOnExit !== undefined) req.retry_on = options.retryOnExit;
  const reply = await call({ op: "activity.submit", ...req });
  return String(reply.run_id);
}

/**
 * Wait for a submitted activity and return its stdout; a non-zero exit (after its
 * retries; 130 when cancelled) raises {@link StepFailed}.
 */
export async function activityCollect(name: string): Promise<string> {
  const reply = await call({ op: "activity.collect", name });
  const exitCode = Number(reply.exit_code ?? 0);
  const stdout = String(reply.stdout ?? "");
  if (exitCode !== 0) throw new StepFailed(name, exitCode, stdout);
  return stdout;
}

/**
 * Run the stored graph `name` (a cryosleep-graph/v1 workflow) with `input` as a child
 * graph run, wait for it and return its output. The first pass parks until the child
 * ends; replays return the recorded output and start nothing. A child that failed raises
 * {@link ScriptError} with code "graph_failed", carrying the child's error.
 */
export async function callGraph(name: string, input: unknown = null): Promise<unknown> {
  checkJson(input, `callGraph ${JSON.stringify(name)} input`);
  const reply = await call({ op: "graph.call", name, input });
  return reply.output ?? null;
}

/**
 * Run one node (a cryosleep-node/v1 document: `type` and its `config`) as a child graph
 * run, wait for it and return the node's output; as {@link callGraph} otherwise.
 */
export async function callNode(
  type: string,
  config: Record<string, unknown>,
  input: unknown = null,
): Promise<unknown> {
  checkJson(config, `callNode ${JSON.stringify(type)} config`);
  checkJson(input, `callNode ${JSON.stringify(type)} input`);
  const reply = await call({ op: "node.call", type, config, input });
  return reply.output ?? null;
}

/** Wait for every submitted, uncollected activity; returns how many failed. */
export async function activityWaitAll(): Promise<number> {
  await requireVerb("activity.wait-all", "activityWaitAll");
  const reply = await call({ op: "activity.wait-all" });
  return Number(reply.failed ?? 0);
}

/**
 * Submit, wait and collect in one call. A non-zero exit (after the retries) raises
 * {@link StepFailed}.
 */
export async function activity(name: string, argv: string[], options: ActivityOptions = {}): Promise<string> {
  await activitySubmit(name, argv, options);
  return activityCollect(name);
}

/** Attach a markdown note to the run page (not durable: every pass adds it again). */
export async function annotate(text: string): Promise<void> {
  await call({ op: "annotate", text });
}

/** Set one of the run's outputs (not durable: every pass sets it again). */
export async function setOutput(key: string, value: unknown): Promise<void> {
  checkJson(value, `setOutput ${JSON.stringify(key)} value`);
  await call({ op: "output.set", key, value });
}

/** The run's input (any JSON), or null when it was submitted without one. */
export function input<T = Json>(): T {
  const path = process.env.CRYO_INPUT_FILE;
  if (!path) {
    throw new ScriptError("outside_run", "input: not inside a cryopg run (CRYO_INPUT_FILE is not set)");
  }
  return JSON.parse(readFileSync(path, "utf8")) as T;
}

/** A state cell's value, or null when it is unset. */
export async function stateGet<T = Json>(key: string, options: StateReadOptions = {}): Promise<T | null> {
  const cell = await stateCell<T>(key, options);
  return cell === null ? null : cell.value;
}

/** A state cell's value with its version (for {@link stateCas}), or null when unset. */
export async function stateCell<T = Json>(key: string, options: StateReadOptions = {}): Promise<CellValue<T> | null> {
  const reply = await call({ op: "state.get", key, entity: options.entity ?? null, ...flag("tainted", options.tainted) });
  return reply.found ? { value: reply.value as T, version: Number(reply.version) } : null;
}

/** Write a state cell; returns its new version. `public: true` lets untrusted runs read a
 * trusted run's entity cell (until a later set without it). */
export async function stateSet(key: string, value: unknown, options: StateSetOptions = {}): Promise<number> {
  checkJson(value, `stateSet ${JSON.stringify(key)} value`);
  const reply = await call({ op: "state.set", key, entity: options.entity ?? null, value, ...flag("public", options.public) });
  return Number(reply.version);
}

/** Delete a state cell; true when there was one. */
export async function stateDelete(key: string, options: StateOptions = {}): Promise<boolean> {
  const reply = await call({ op: "state.delete", key, entity: options.entity ?? null });
  return Boolean(reply.deleted);
}

/** Every cell of the scope, in key order (`tainted: true`: those untrusted runs wrote). */
export async function stateList<T = Json>(options: StateReadOptions = {}): Promise<StateCell<T>[]> {
  const reply = await call({ op: "state.list", entity: options.entity ?? null, ...flag("tainted", options.tainted) });
  return (Array.isArray(reply.cells) ? reply.cells : []).map((c: any) => ({
    key: String(c.key),
    value: c.value as T,
    version: Number(c.version),
  }));
}

/**
 * Claim a cell if nobody has (recorded: a replay gives the same answer). True when this
 * run won it. `value` defaults to `true`.
 */
export async function stateAdd(
  key: string,
  options: StateOptions & { value?: unknown } = {},
): Promise<boolean> {
  const value = options.value === undefined ? true : options.value;
  checkJson(value, `stateAdd ${JSON.stringify(key)} value`);
  await requireVerb("state.add", "stateAdd");
  const reply = await call({ op: "state.add", key, entity: options.entity ?? null, value });
  return Boolean(reply.claimed);
}

/**
 * Write `value` only if the cell is still at version `expect` (recorded under `as`,
 * default the key, which a run may use once). True when it swapped.
 */
export async function stateCas(
  key: string,
  value: unknown,
  expect: number,
  options: StateOptions & { as?: string } = {},
): Promise<boolean> {
  checkJson(value, `stateCas ${JSON.stringify(key)} value`);
  const req: Record<string, unknown> = { key, entity: options.entity ?? null, value, expect };
  if (options.as !== undefined) req.as = options.as;
  const reply = await call({ op: "state.cas", ...req });
  return Boolean(reply.swapped);
}

/** Add `by` (default 1) to a numeric cell and return the total (recorded under `as`). */
export async function stateIncr(
  key: string,
  options: StateOptions & { by?: number; as?: string } = {},
): Promise<number> {
  const by = options.by ?? 1;
  const req: Record<string, unknown> = { key, entity: options.entity ?? null, by };
  if (options.as !== undefined) req.as = options.as;
  const reply = await call({ op: "state.incr", ...req });
  return Number(reply.value);
}

/**
 * Hold the project-wide lease `group` while `body` runs, releasing it when the body
 * returns or throws. On a held group the run parks until the lease is granted.
 */
export async function lock<T>(group: string, body: () => T | Promise<T>): Promise<T> {
  await call({ op: "lock.acquire", group, scoped: true });
  let result: T;
  try {
    result = await body();
  } catch (err) {
    try {
      await call({ op: "lock.release", group });
    } catch {
      // the body's error is the one worth seeing
    }
    throw err;
  }
  await call({ op: "lock.release", group });
  return result;
}
