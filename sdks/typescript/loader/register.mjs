// Lets node 20 (which cannot strip types itself) run a .ts workflow:
//   node --import /path/to/sdks/typescript/loader/register.mjs workflow.ts
// Each .ts module is transpiled (types erased, nothing checked) with the typescript
// package installed beside this SDK (`npm install` in sdks/typescript).
import { register } from "node:module";

register("./hooks.mjs", import.meta.url);
