// The graph expression language, checked as the server checks it (cryopg/graphs/expr.py)
// so the editor can say what is wrong while the user types: checkExpr / checkTemplate
// return null or a one-line reason. The server stays the judge; this is a preview.
const ROOTS = new Set(["input", "nodes", "node", "item", "item_index", "run", "trigger"]);
const COMPARE = new Set(["==", "!=", "<=", ">=", "<", ">"]);
const TOKEN = /\s*(?:(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(==|!=|<=|>=|<|>|\(|\)|\.|\[|\])|([A-Za-z_][A-Za-z0-9_-]*))/y;
const MAX_EXPR = 2000, MAX_NESTING = 32, MAX_NUMBER = 32, MAX_TEMPLATE = 1 << 20, MAX_HOLES = 1000;
const short = (t) => JSON.stringify(t.length <= 80 ? t : t.slice(0, 80) + "...");

function tokens(text) {
  const out = [];
  text = text.trimEnd();
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < text.length) {
    const at = TOKEN.lastIndex;
    const m = TOKEN.exec(text);
    if (!m || TOKEN.lastIndex === at) throw new Error(`cannot read ${short(text.slice(at, at + 12))} in ${short(text)}`);
    out.push(m[1] !== undefined ? ["num", m[1]] : m[2] !== undefined ? ["str", m[2]] : m[3] !== undefined ? ["op", m[3]] : ["name", m[4]]);
  }
  return out;
}

function parse(text, ids) {
  if (typeof text !== "string") throw new Error("an expression must be a string");
  if (text.length > MAX_EXPR) throw new Error(`an expression is at most ${MAX_EXPR} characters`);
  const toks = tokens(text);
  let i = 0, depth = 0;
  const peek = () => toks[i];
  const take = () => { if (i >= toks.length) throw new Error(`${short(text)} ends too soon`); return toks[i++]; };
  const nest = () => { if (++depth > MAX_NESTING) throw new Error(`an expression nests deeper than ${MAX_NESTING} levels`); };
  const word = (w) => { const t = peek(); if (t && t[0] === "name" && t[1] === w) { i++; return true; } return false; };
  function chain(op, term) { const start = depth; term(); while (word(op)) { nest(); term(); } depth = start; }
  const or = () => chain("or", and);
  const and = () => chain("and", not);
  function not() { if (word("not")) { nest(); not(); depth--; return; } compare(); }
  function compare() { operand(); const t = peek(); if (t && t[0] === "op" && COMPARE.has(t[1])) { i++; operand(); } }
  function operand() {
    const [kind, val] = take();
    if (kind === "num") return number(val);
    if (kind === "str") return;
    if (kind === "op" && val === "(") {
      nest(); or();
      const t = take();
      if (t[0] !== "op" || t[1] !== ")") throw new Error(`a '(' is not closed in ${short(text)}`);
      depth--; return;
    }
    if (kind === "name") { if (!["true", "false", "null"].includes(val)) path(val); return; }
    throw new Error(`unexpected '${val}' in ${short(text)}`);
  }
  function path(root) {
    if (!ROOTS.has(root)) throw new Error(`'${root}' is not in scope (use ${[...ROOTS].sort().join(", ")})`);
    const parts = [root];
    for (;;) {
      const t = peek();
      if (t && t[0] === "op" && t[1] === ".") {
        i++;
        const [k, v] = take();
        if (!(k === "name" || (k === "num" && /^\d+$/.test(v)))) throw new Error(`a name must follow '.' in ${short(text)}`);
        parts.push(v);
      } else if (t && t[0] === "op" && t[1] === "[") {
        i++;
        const [k, v] = take();
        const close = take();
        if (k !== "num" || !/^\d+$/.test(v) || close[1] !== "]") throw new Error(`[...] takes a list index in ${short(text)}`);
        parts.push(v);
      } else break;
    }
    if (root === "nodes") {
      if (parts.length < 3) throw new Error(`nodes.<id>.output or nodes.<id>.status, in ${short(text)}`);
      if (ids && !ids.has(parts[1])) throw new Error(`no node '${parts[1]}' in this graph`);
      if (!["output", "status"].includes(parts[2])) throw new Error(`nodes.${parts[1]} has output and status, not '${parts[2]}'`);
    }
  }
  if (!toks.length) throw new Error("an expression cannot be empty");
  or();
  if (i < toks.length) throw new Error(`unexpected '${toks[i][1]}' in ${short(text)}`);
}

function number(val) {
  if (val.length > MAX_NUMBER) throw new Error(`number ${val.slice(0, 16)}... is longer than ${MAX_NUMBER} characters`);
  if (/[.eE]/.test(val)) { if (!Number.isFinite(Number(val))) throw new Error(`number ${val} is too large`); }
  else if (BigInt(val) < -(2n ** 63n) || BigInt(val) >= 2n ** 63n) throw new Error(`integer ${val} does not fit 64 bits`);
}

const HOLE = /\{\{((?:[^}'"]|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\}(?!\}))*)\}\}/y;

function parseTemplate(text, ids) {
  if (typeof text !== "string") throw new Error("a template must be a string");
  if (text.length > MAX_TEMPLATE) throw new Error(`a template is at most ${MAX_TEMPLATE} characters`);
  let pos = 0, start, holes = 0;
  while ((start = text.indexOf("{{", pos)) >= 0) {
    HOLE.lastIndex = start;
    const m = HOLE.exec(text);
    if (!m) throw new Error(`unbalanced {{ }} in template ${short(text.slice(start))}`);
    if (++holes > MAX_HOLES) throw new Error(`a template has at most ${MAX_HOLES} {{ }} holes`);
    parse(m[1].trim(), ids);
    pos = HOLE.lastIndex;
  }
}

const reason = (f) => { try { f(); return null; } catch (e) { return e.message; } };
export const checkExpr = (text, ids) => reason(() => parse(text, ids));
export const checkTemplate = (text, ids) => reason(() => parseTemplate(text, ids));

// Every $expr / $template inside a config value: [[path, reason]] for those that fail.
export function checkValue(value, ids, at = "config") {
  const bad = [];
  if (value && typeof value === "object" && !Array.isArray(value)) {
    if ("$expr" in value) { const r = checkExpr(value.$expr, ids); if (r) bad.push([at, r]); return bad; }
    if ("$template" in value) { const r = checkTemplate(value.$template, ids); if (r) bad.push([at, r]); return bad; }
    for (const [k, v] of Object.entries(value)) bad.push(...checkValue(v, ids, `${at}.${k}`));
  } else if (Array.isArray(value)) value.forEach((v, i) => bad.push(...checkValue(v, ids, `${at}[${i}]`)));
  return bad;
}
