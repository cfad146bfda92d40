/**
 * One request per connection to the agent socket (`$CRYO_SOCKET`): connect, write one
 * JSON line, read one JSON line. Only the connect is retried; a request that reached
 * the wire is never sent again, because replay is what re-runs a step.
 */
import { type Socket } from "node:net";
export type Request = {
    op: string;
} & Record<string, unknown>;
export type Reply = {
    ok: boolean;
} & Record<string, any>;
export declare function socketPath(op: string): string;
export declare function connect(path: string): Promise<Socket>;
/** Send one request and return its reply; raise the matching error kind otherwise. */
export declare function call(req: Request): Promise<Reply>;
/** The agent's verbs, asked once per process (`hello`). */
export declare function agentVerbs(): Promise<Set<string>>;
/** Fail at the call site when the agent does not advertise `verb`. */
export declare function requireVerb(verb: string, what: string): Promise<void>;
/** Forget what the agent advertised (tests run several fake agents in one process). */
export declare function resetAgentCache(): void;
