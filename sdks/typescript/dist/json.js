/**
 * Values that cross the socket must round-trip through JSON: what a replay hands back
 * is the decoded JSON, so anything JSON would drop or change is refused up front.
 */
import { ScriptError } from "./errors.js";
function describe(value) {
    switch (typeof value) {
        case "undefined":
            return "undefined";
        case "function":
            return "a function";
        case "symbol":
            return "a symbol";
        case "bigint":
            return "a bigint";
        case "number":
            return Number.isFinite(value) ? undefined : String(value);
        case "object": {
            if (value === null || Array.isArray(value))
                return undefined;
            const proto = Object.getPrototypeOf(value);
            if (proto === Object.prototype || proto === null)
                return undefined;
            const ctor = proto?.constructor?.name || "non-plain object";
            return `a ${ctor}`;
        }
        default:
            return undefined;
    }
}
function walk(value, path, seen, what) {
    const bad = describe(value);
    if (bad !== undefined) {
        throw new ScriptError("not_json", `${what}: ${path} is ${bad}, which does not round-trip through JSON`);
    }
    if (value === null || typeof value !== "object")
        return;
    if (seen.has(value)) {
        throw new ScriptError("not_json", `${what}: ${path} refers back to itself (a cycle is not JSON)`);
    }
    seen.add(value);
    if (Array.isArray(value)) {
        value.forEach((item, i) => walk(item, `${path}[${i}]`, seen, what));
    }
    else {
        for (const [k, v] of Object.entries(value))
            walk(v, `${path}.${k}`, seen, what);
    }
    seen.delete(value);
}
/** JSON text of `value`, or a ScriptError naming the first part that would not survive. */
export function encodeJson(value, what) {
    walk(value, "the value", new Set(), what);
    return JSON.stringify(value);
}
/** Throws like {@link encodeJson} when `value` cannot be sent. */
export function checkJson(value, what) {
    walk(value, "the value", new Set(), what);
}
