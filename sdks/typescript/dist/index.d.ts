import { AgentUnavailable, ScriptError, StepFailed, WaitTimeout } from "./errors.js";
import { agentVerbs, resetAgentCache } from "./transport.js";
export { AgentUnavailable, ScriptError, StepFailed, WaitTimeout, agentVerbs, resetAgentCache };
export { artifactGet, artifactList, artifactPut, type ArtifactGetOptions, type ArtifactInfo, type ArtifactListOptions, type ArtifactPutOptions, } from "./artifacts.js";
/** A JSON value as it comes back from the journal. */
export type Json = null | boolean | number | string | Json[] | {
    [key: string]: Json;
};
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
/** A {@link Duration} in milliseconds; a malformed string is a ScriptError bad_request. */
export declare function toMs(value: Duration, what?: string): number;
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
export declare function stepFn<T>(name: string, fn: () => T | Promise<T>, options?: StepOptions): Promise<T>;
/**
 * Run a command as a durable step and return its stdout. A non-zero exit is recorded
 * too, and raises {@link StepFailed} on this pass and every replay.
 */
export declare function step(name: string, argv: string[], options?: CommandOptions): Promise<string>;
/** {@link step} that hands back the exit code instead of raising on a non-zero one. */
export declare function stepUnchecked(name: string, argv: string[], options?: CommandOptions): Promise<StepResult>;
/** Park the run for `duration` (milliseconds, or "5m"); the agent is freed meanwhile. */
export declare function sleep(duration: Duration): Promise<void>;
/**
 * Park until the named signal arrives (`cryopg signal RUN NAME`) and return its payload.
 * With `timeoutMs`, raise {@link WaitTimeout} when none arrived in time.
 */
export declare function waitSignal<T = Json>(name: string, options?: WaitOptions): Promise<T>;
/**
 * Park until a project bus event of this name is published after the wait began, and
 * return its payload. With `timeoutMs`, raise {@link WaitTimeout} when none arrived.
 * A trusted run hears untrusted runs' events only with `tainted: true`; an untrusted run
 * hears those and published ones.
 */
export declare function waitEvent<T = Json>(name: string, options?: WaitEventOptions): Promise<T>;
/** Publish an event on the project bus (recorded: a replay does not publish again).
 * With `public: true` a trusted run's event reaches untrusted runs waiting on it too. */
export declare function emit(name: string, payload?: unknown, options?: EmitOptions): Promise<void>;
/** Start a child workflow run; returns its run id (recorded by call order). */
export declare function spawn(filename: string, options?: SpawnOptions): Promise<string>;
/** Submit an activity (a child run of `argv`) under a name unique in this run. */
export declare function activitySubmit(name: string, argv: string[], options?: ActivityOptions): Promise<string>;
/**
 * Wait for a submitted activity and return its stdout; a non-zero exit (after its
 * retries; 130 when cancelled) raises {@link StepFailed}.
 */
export declare function activityCollect(name: string): Promise<string>;
/**
 * Run the stored graph `name` (a cryosleep-graph/v1 workflow) with `input` as a child
 * graph run, wait for it and return its output. The first pass parks until the child
 * ends; replays return the recorded output and start nothing. A child that failed raises
 * {@link ScriptError} with code "graph_failed", carrying the child's error.
 */
export declare function callGraph(name: string, input?: unknown): Promise<unknown>;
/**
 * Run one node (a cryosleep-node/v1 document: `type` and its `config`) as a child graph
 * run, wait for it and return the node's output; as {@link callGraph} otherwise.
 */
export declare function callNode(type: string, config: Record<string, unknown>, input?: unknown): Promise<unknown>;
/** Wait for every submitted, uncollected activity; returns how many failed. */
export declare function activityWaitAll(): Promise<number>;
/**
 * Submit, wait and collect in one call. A non-zero exit (after the retries) raises
 * {@link StepFailed}.
 */
export declare function activity(name: string, argv: string[], options?: ActivityOptions): Promise<string>;
/** Attach a markdown note to the run page (not durable: every pass adds it again). */
export declare function annotate(text: string): Promise<void>;
/** Set one of the run's outputs (not durable: every pass sets it again). */
export declare function setOutput(key: string, value: unknown): Promise<void>;
/** The run's input (any JSON), or null when it was submitted without one. */
export declare function input<T = Json>(): T;
/** A state cell's value, or null when it is unset. */
export declare function stateGet<T = Json>(key: string, options?: StateReadOptions): Promise<T | null>;
/** A state cell's value with its version (for {@link stateCas}), or null when unset. */
export declare function stateCell<T = Json>(key: string, options?: StateReadOptions): Promise<CellValue<T> | null>;
/** Write a state cell; returns its new version. `public: true` lets untrusted runs read a
 * trusted run's entity cell (until a later set without it). */
export declare function stateSet(key: string, value: unknown, options?: StateSetOptions): Promise<number>;
/** Delete a state cell; true when there was one. */
export declare function stateDelete(key: string, options?: StateOptions): Promise<boolean>;
/** Every cell of the scope, in key order (`tainted: true`: those untrusted runs wrote). */
export declare function stateList<T = Json>(options?: StateReadOptions): Promise<StateCell<T>[]>;
/**
 * Claim a cell if nobody has (recorded: a replay gives the same answer). True when this
 * run won it. `value` defaults to `true`.
 */
export declare function stateAdd(key: string, options?: StateOptions & {
    value?: unknown;
}): Promise<boolean>;
/**
 * Write `value` only if the cell is still at version `expect` (recorded under `as`,
 * default the key, which a run may use once). True when it swapped.
 */
export declare function stateCas(key: string, value: unknown, expect: number, options?: StateOptions & {
    as?: string;
}): Promise<boolean>;
/** Add `by` (default 1) to a numeric cell and return the total (recorded under `as`). */
export declare function stateIncr(key: string, options?: StateOptions & {
    by?: number;
    as?: string;
}): Promise<number>;
/**
 * Hold the project-wide lease `group` while `body` runs, releasing it when the body
 * returns or throws. On a held group the run parks until the lease is granted.
 */
export declare function lock<T>(group: string, body: () => T | Promise<T>): Promise<T>;
