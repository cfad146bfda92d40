/**
 * The three ways a durable call can fail, as classes a script can tell apart with
 * `instanceof`:
 *
 * - {@link StepFailed}: a step's command ran and exited non-zero. A result of the
 *   workflow, safe to catch and branch on.
 * - {@link ScriptError}: the request was refused (a bad argument, a reused activity
 *   name, a value that is not JSON, a call outside a run, an agent too old for the
 *   verb). Deterministic: replaying will not fix it, so let it fail the run.
 * - {@link AgentUnavailable}: the agent could not be reached or went away while the
 *   call was on the wire. Never retried; the engine replays the run from the top.
 *
 * A bounded wait that runs out raises {@link WaitTimeout}.
 */
/** A step's command exited non-zero. `exitCode` and `stdout` are the recorded ones. */
export declare class StepFailed extends Error {
    readonly step: string;
    readonly exitCode: number;
    readonly stdout: string;
    constructor(step: string, exitCode: number, stdout: string);
}
/**
 * A refused or malformed request. `code` is the agent's error code (`bad_request`,
 * `determinism`, `reserved_key`, `invalid_argument`, `not_a_number`, …) or one of the
 * SDK's own: `outside_run`, `not_json`, `unsupported_verb`.
 */
export declare class ScriptError extends Error {
    readonly code: string;
    constructor(code: string, message: string);
}
/** The agent could not be reached, or dropped the connection mid-call. Re-throw it. */
export declare class AgentUnavailable extends Error {
    constructor(message: string);
}
/** A bounded wait (`waitSignal` / `waitEvent` with `timeoutMs`) ran out; recorded, so a
 * replay times out again. `wait` says which kind of wait it was. */
export declare class WaitTimeout extends Error {
    readonly wait: "signal" | "event";
    readonly waitName: string;
    constructor(wait: "signal" | "event", waitName: string, timeoutMs: number);
}
