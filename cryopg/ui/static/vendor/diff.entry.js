export { createTwoFilesPatch, structuredPatch, diffLines } from "diff";
