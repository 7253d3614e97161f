// The job page's log view: a job's output drawn as a terminal would show it. A carriage
// return starts its line again (a tqdm bar shows its last state, not every state run together);
// SGR colours and bold become spans with ansi-* classes; every other escape sequence and
// control character is dropped. Job output is hostile input: it only ever reaches the page as
// text nodes and textContent, and the classes come from a fixed list, never from the output.
"use strict";

const gpTerminal = (() => {
  const COLOURS = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"];
  // one token at a time: CSI (group 1 parameters, group 2 final byte), OSC, another escape,
  // CR (3), LF (4), another control character, or plain text (5; tabs included)
  const TOKEN =
    /\x1b\[([0-?]*)[ -\/]*([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[ -\/]*[0-~]|(\r)|(\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|([^\x00-\x08\x0a-\x1f\x7f-\x9f]+)/gy;
  // an escape sequence cut at the end of a chunk: kept until the next chunk completes it
  const PARTIAL = /\x1b(?:\[[0-?]*[ -\/]*|\][^\x07\x1b]*|[ -\/]*)?$/;
  const MAX_PARTIAL = 256;

  function colour(code) {
    if (code >= 30 && code <= 37) return COLOURS[code - 30];
    if (code >= 90 && code <= 97) return `bright-${COLOURS[code - 90]}`;
    return null;
  }

  function indexed(n) {
    if (n < 8) return COLOURS[n];
    if (n < 16) return `bright-${COLOURS[n - 8]}`;
    return null; // 256-colour and true-colour shades are not drawn (the page allows no inline style)
  }

  // SGR parameters applied to a style: {bold, dim, italic, underline, fg, bg}
  function applySgr(style, text) {
    const codes = text === "" ? [0] : text.split(/[;:]/).map((c) => (c === "" ? 0 : Number(c)));
    for (let i = 0; i < codes.length; i += 1) {
      const code = codes[i];
      if (code === 38 || code === 48) {
        const key = code === 38 ? "fg" : "bg";
        if (codes[i + 1] === 5) style[key] = indexed(codes[i + 2]);
        i += codes[i + 1] === 5 ? 2 : codes[i + 1] === 2 ? 4 : 0;
      } else applyOne(style, code);
    }
  }

  function applyOne(style, code) {
    if (code === 0) Object.assign(style, { bold: false, dim: false, italic: false, underline: false, fg: null, bg: null });
    else if (code === 1) style.bold = true;
    else if (code === 2) style.dim = true;
    else if (code === 3) style.italic = true;
    else if (code === 4) style.underline = true;
    else if (code === 22) Object.assign(style, { bold: false, dim: false });
    else if (code === 23) style.italic = false;
    else if (code === 24) style.underline = false;
    else if (code === 39) style.fg = null;
    else if (code === 49) style.bg = null;
    else if (colour(code)) style.fg = colour(code);
    else if (colour(code - 10)) style.bg = colour(code - 10);
  }

  function classes(style) {
    const names = ["bold", "dim", "italic", "underline"].filter((k) => style[k]).map((k) => `ansi-${k}`);
    if (style.fg) names.push(`ansi-${style.fg}`);
    if (style.bg) names.push(`ansi-bg-${style.bg}`);
    return names.join(" ");
  }

  // A view on `pre`: write(text) draws output, note(text) a line of our own, clear() empties
  // it. At most `limit` characters are kept; the oldest lines go first, and a note says so.
  function create(pre, { limit = 2000000, trimmed = "" } = {}) {
    let style, line, returned, carry, kept, cut;

    function clear() {
      pre.replaceChildren();
      style = {};
      applyOne(style, 0);
      line = null;
      returned = false;
      carry = "";
      kept = 0;
      cut = false;
    }

    function openLine() {
      if (!line) {
        line = document.createElement("span");
        line.className = "log-line";
        pre.append(line);
      }
      return line;
    }

    function endLine() {
      openLine().append("\n");
      kept += 1;
      line = null;
    }

    function addText(text) {
      const target = openLine();
      if (returned) {
        kept -= target.textContent.length;
        target.replaceChildren(); // a carriage return: the line starts again
        returned = false;
      }
      const name = classes(style);
      const last = target.lastChild;
      if (last && (last.nodeType === Node.TEXT_NODE ? name === "" : last.className === name)) {
        last.textContent += text;
      } else if (name) {
        const span = document.createElement("span");
        span.className = name;
        span.textContent = text;
        target.append(span);
      } else target.append(document.createTextNode(text));
      kept += text.length;
    }

    function write(chunk) {
      let text = carry + chunk;
      const partial = PARTIAL.exec(text);
      carry = partial && partial[0].length <= MAX_PARTIAL ? partial[0] : "";
      if (carry) text = text.slice(0, text.length - carry.length);
      TOKEN.lastIndex = 0;
      let match;
      while (TOKEN.lastIndex < text.length && (match = TOKEN.exec(text)) !== null) {
        if (match[5] !== undefined) addText(match[5]);
        else if (match[4] !== undefined) {
          returned = false;
          endLine();
        } else if (match[3] !== undefined) returned = true;
        else if (match[2] === "m") applySgr(style, match[1]);
      }
      trim();
    }

    function note(text) {
      if (line) endLine();
      const span = document.createElement("span");
      span.className = "log-line log-note";
      span.textContent = `${text}\n`;
      pre.append(span);
      kept += span.textContent.length;
    }

    function trim() {
      const oldest = () => {
        const first = pre.firstChild;
        return first && first.classList.contains("log-trimmed") ? first.nextSibling : first;
      };
      for (let node = oldest(); kept > limit && node && node !== line; node = oldest()) {
        kept -= node.textContent.length;
        node.remove();
        cut = true;
      }
      if (cut && trimmed && !pre.firstChild?.classList.contains("log-trimmed")) {
        const span = document.createElement("span");
        span.className = "log-line log-note log-trimmed";
        span.textContent = `${trimmed}\n`;
        pre.prepend(span);
      }
    }

    clear();
    return { write, note, clear };
  }

  return { create };
})();
