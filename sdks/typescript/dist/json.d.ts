/** JSON text of `value`, or a ScriptError naming the first part that would not survive. */
export declare function encodeJson(value: unknown, what: string): string;
/** Throws like {@link encodeJson} when `value` cannot be sent. */
export declare function checkJson(value: unknown, what: string): void;
