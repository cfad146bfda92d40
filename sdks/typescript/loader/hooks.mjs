// Module hooks for register.mjs: load .ts/.mts files as ES modules, types erased, and
// find @cryosleep/sdk when the workflow's directory has no node_modules.
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

let ts;
const sdkEntry = new URL("../dist/index.js", import.meta.url).href;

// A workflow run from a scratch directory has no node_modules: `@cryosleep/sdk` then
// resolves to the copy this loader belongs to. An installed copy, when there is one, wins.
export async function resolve(specifier, context, nextResolve) {
  if (specifier !== "@cryosleep/sdk") return nextResolve(specifier, context);
  try {
    return await nextResolve(specifier, context);
  } catch {
    return { url: sdkEntry, shortCircuit: true };
  }
}

export async function load(url, context, nextLoad) {
  if (!/\.m?ts$/.test(new URL(url).pathname) || !url.startsWith("file:")) {
    return nextLoad(url, context);
  }
  // require, not import: node would scan the 9 MB CommonJS file for named exports.
  ts ??= createRequire(import.meta.url)("typescript");
  const path = fileURLToPath(url);
  const source = await readFile(path, "utf8");
  const out = ts.transpileModule(source, {
    fileName: path,
    compilerOptions: {
      module: ts.ModuleKind.ESNext,
      target: ts.ScriptTarget.ES2022,
      sourceMap: false,
      inlineSourceMap: true,
    },
  });
  return { format: "module", source: out.outputText, shortCircuit: true };
}
