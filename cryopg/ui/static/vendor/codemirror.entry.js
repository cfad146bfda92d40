// The CodeMirror 6 pieces the workflow editor uses, bundled once into one ES module.
export { EditorView, keymap } from "@codemirror/view";
export { EditorState, Compartment } from "@codemirror/state";
export { basicSetup } from "codemirror";
export { StreamLanguage } from "@codemirror/language";
export { yaml } from "@codemirror/lang-yaml";
export { python } from "@codemirror/lang-python";
export { shell } from "@codemirror/legacy-modes/mode/shell";
export { linter, lintGutter, setDiagnostics, forEachDiagnostic } from "@codemirror/lint";
