// The code editor: CodeMirror 6, with the highlighting of the language picked.
//
// Why a shadow root: CodeMirror injects its styles with style-mod, which in a document adds a
// <style> element, refused by the server's `style-src 'self'` (a nonce would need a page made per
// response). In a shadow root style-mod uses a constructed stylesheet (adoptedStyleSheets)
// instead, which Content-Security-Policy does not govern, and CodeMirror sets every inline style
// through the CSSOM (element.style), which it does not govern either. So the editor works under
// the strict policy with no 'unsafe-inline'.

import { EditorView, basicSetup } from "codemirror";
import { Compartment, EditorState } from "@codemirror/state";
import { keymap } from "@codemirror/view";
import { indentWithTab } from "@codemirror/commands";
import { StreamLanguage } from "@codemirror/language";
import { python } from "@codemirror/lang-python";
import { javascript } from "@codemirror/lang-javascript";
import { cpp } from "@codemirror/lang-cpp";
import { java } from "@codemirror/lang-java";
import { rust } from "@codemirror/lang-rust";
import { go } from "@codemirror/lang-go";
import { shell } from "@codemirror/legacy-modes/mode/shell";

// sandboxd's language names (GET /v1/languages) to their highlighting; others get none.
const LANGUAGES = {
  python: () => python(),
  bash: () => StreamLanguage.define(shell),
  sh: () => StreamLanguage.define(shell),
  javascript: () => javascript(),
  typescript: () => javascript({ typescript: true }),
  c: () => cpp(),
  cpp: () => cpp(),
  java: () => java(),
  rust: () => rust(),
  go: () => go(),
};

function highlighting(language) {
  const make = LANGUAGES[language];
  return make ? make() : [];
}

// The editor's look (inside the shadow root, app.css does not reach it).
const theme = EditorView.theme({
  "&": {
    fontSize: "14px",
    border: "1px solid #c9ced6",
    borderRadius: "4px",
    backgroundColor: "#fff",
  },
  "&.cm-focused": { outline: "2px solid #8ab4f8", outlineOffset: "-1px" },
  ".cm-scroller": {
    fontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace",
    minHeight: "var(--editor-min-height, 8em)",
    maxHeight: "var(--editor-max-height, 28em)",
    overflow: "auto",
  },
  ".cm-content": { minHeight: "var(--editor-min-height, 8em)" },
  ".cm-gutters": { backgroundColor: "#f6f7f9", borderRight: "1px solid #e3e6ea" },
});

// A CodeMirror editor in a shadow root of host. onRun: called by Ctrl/Cmd+Enter.
export class Editor {
  constructor(host, { doc = "", language = "python", onRun } = {}) {
    const root = host.attachShadow({ mode: "open" });
    this.language = new Compartment();
    const runKey = {
      key: "Mod-Enter",
      preventDefault: true,
      run: () => {
        if (onRun) onRun();
        return true;
      },
    };
    this.view = new EditorView({
      root,
      parent: root,
      state: EditorState.create({
        doc,
        extensions: [
          keymap.of([runKey, indentWithTab]),
          basicSetup,
          theme,
          this.language.of(highlighting(language)),
        ],
      }),
    });
  }

  get text() {
    return this.view.state.doc.toString();
  }

  set text(value) {
    this.view.dispatch({ changes: { from: 0, to: this.view.state.doc.length, insert: value } });
  }

  setLanguage(language) {
    this.view.dispatch({ effects: this.language.reconfigure(highlighting(language)) });
  }

  focus() {
    this.view.focus();
  }
}
