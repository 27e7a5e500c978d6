"""The page of ``fsa-analyze explore``: one self-contained HTML file (inline CSS and JS, the
data of :func:`.explorer.explorer_data` embedded as JSON; no network).

What the page does (all in the browser, from the embedded data):

* a sentence picker; for the chosen pair, one grid per attention kind (rows: layers,
  columns: heads, both numbered from 0), each cell a small heatmap with the head's
  sparsity and number of null rows, fixed-pattern heads labelled with their pattern;
* toggles: α or ‖αf(x)‖ (= |α_ij|·‖f^h(x_j)‖), subwords or words (mean over the query
  pieces of a word, sum over its key pieces: :func:`.alignment.merge_subwords`'s rule);
* one colour scale per attention kind and sentence (its largest value over every layer
  and head), drawn as a colour bar; white = exactly 0, grey = a key the query cannot see
  (decoder self-attention is causal), a red mark = a null row (every visible weight 0);
* a click on a cell enlarges it: the matrix with its source/target tokens, the value of
  each cell on hover.

``explore.html#selftest`` runs a self-check after loading and writes its findings as JSON
into ``<pre id="selftest-result">`` (read by tests/integration/test_explorer.py through
``chromium --headless --dump-dom``); ``#open=KIND/LAYER/HEAD&values=norm&view=word``
opens a head on load (for screenshots).
"""

import html
import json
from typing import Dict

_CSS = r"""
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 4px 0; }
h2 { font-size: 15px; margin: 18px 0 6px 0; }
.sub { color: #555; font-size: 12px; }
#controls { position: sticky; top: 0; background: #fff; padding: 8px 0; border-bottom: 1px solid #ddd; z-index: 5;
            display: flex; gap: 18px; flex-wrap: wrap; align-items: center; font-size: 13px; }
#controls select { max-width: 520px; }
.pair { font-size: 13px; margin: 8px 0; }
.pair b { display: inline-block; width: 60px; }
.legend { font-size: 12px; color: #444; display: flex; gap: 14px; flex-wrap: wrap; align-items: center; margin: 4px 0; }
.swatch { display: inline-block; width: 12px; height: 12px; border: 1px solid #999; vertical-align: middle; margin-right: 3px; }
table.grid { border-collapse: collapse; }
table.grid th { font-size: 11px; font-weight: normal; color: #555; padding: 2px 4px; }
td.cellwrap { padding: 3px; vertical-align: top; }
.cell { border: 1px solid #ccc; padding: 2px; cursor: pointer; background: #fff; text-align: center; }
.cell:hover { border-color: #1f6feb; }
.cell canvas { display: block; margin: 0 auto; image-rendering: pixelated; }
.cell .info { font-size: 10px; color: #444; margin-top: 2px; white-space: nowrap; }
.cell .fixed { font-size: 10px; color: #fff; background: #8250df; border-radius: 3px; padding: 0 3px; }
.cell .nulls { color: #c00; }
.note { font-size: 12px; color: #8a4b00; margin: 2px 0; }
.colorbar { display: inline-flex; align-items: center; gap: 4px; font-size: 11px; }
.colorbar canvas { border: 1px solid #999; }
#modal { display: none; position: fixed; inset: 0; background: rgba(0,0,0,0.45); z-index: 10; overflow: auto; }
#modal .box { background: #fff; margin: 30px auto; padding: 14px; width: fit-content; max-width: 95vw; border-radius: 6px; }
#modal h3 { margin: 0 0 6px 0; font-size: 15px; }
#modal .close { float: right; cursor: pointer; font-size: 18px; border: none; background: none; }
table.big { border-collapse: collapse; font-size: 11px; }
table.big td.v { width: 26px; height: 26px; min-width: 26px; border: 1px solid #f3f3f3; padding: 0; }
table.big th { font-weight: normal; padding: 1px 4px; white-space: nowrap; }
table.big th.key { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left; height: 70px; vertical-align: bottom; }
table.big th.query { text-align: right; }
table.big th.null { color: #c00; font-weight: bold; }
.axis { font-size: 11px; color: #555; }
#hover { font-size: 12px; min-height: 16px; margin-top: 6px; font-family: monospace; }
"""

_JS = r"""
"use strict";
const DATA = JSON.parse(document.getElementById("fsa-data").textContent);
const KIND_NAMES = {encoder_self: "Encoder self-attention", decoder_self: "Decoder self-attention",
                    cross: "Cross-attention (decoder queries, source keys)"};
const state = {sentence: 0, view: "subword", values: "alpha", open: null};

// viridis, 9 stops (matplotlib's)
const VIRIDIS = [[68,1,84],[71,44,122],[59,81,139],[44,113,142],[33,144,141],[39,173,129],[92,200,99],[170,220,50],[253,231,37]];
function colour(x) {
  x = Math.max(0, Math.min(1, x)) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2), f = x - i;
  const c = VIRIDIS[i].map((v, k) => Math.round(v + f * (VIRIDIS[i + 1][k] - v)));
  return "rgb(" + c.join(",") + ")";
}
const ZERO = "#ffffff", HIDDEN = "#d0d0d0", NULLMARK = "#d00000";

function sides(s, kind) {
  if (kind === "encoder_self") return [s.source, s.source];
  if (kind === "decoder_self") return [s.decoder_input, s.decoder_input];
  return [s.decoder_input, s.source];
}

// one head's matrix in the current view: {m, hidden, zero, nullRows, qLabels, kLabels}
function headMatrix(s, kind, layer, head, values, view) {
  const e = s.attention[kind][layer];
  const w = e.weights[head];
  const f = e.f_norm ? e.f_norm[head] : null;
  const nq = w.length, nk = w[0].length;
  const m = [], hidden = [], zero = [];
  for (let i = 0; i < nq; i++) {
    m.push([]); hidden.push([]); zero.push([]);
    for (let j = 0; j < nk; j++) {
      const a = w[i][j] / DATA.weight_scale;
      const h = kind === "decoder_self" && j > i;
      let v = a;
      if (values === "norm") v = f ? Math.abs(a) * f[j] : NaN;
      m[i].push(h ? 0 : v); hidden[i].push(h); zero[i].push(!h && w[i][j] === 0);
    }
  }
  const [qs, ks] = sides(s, kind);
  let nullRows = e.null_rows[head].slice();
  if (view === "subword") return {m, hidden, zero, nullRows, qLabels: qs.tokens, kLabels: ks.tokens};
  // words: mean over the query pieces of a word, sum over its key pieces
  const nqw = qs.words.length, nkw = ks.words.length;
  const M = [], H = [], Z = [], count = new Array(nqw).fill(0);
  for (let t = 0; t < nqw; t++) { M.push(new Array(nkw).fill(0)); H.push(new Array(nkw).fill(true)); Z.push(new Array(nkw).fill(true)); }
  for (let i = 0; i < nq; i++) {
    const t = qs.word_of[i];
    count[t] += 1;
    for (let j = 0; j < nk; j++) {
      const u = ks.word_of[j];
      M[t][u] += m[i][j];
      if (!hidden[i][j]) { H[t][u] = false; if (!zero[i][j]) Z[t][u] = false; }
    }
  }
  for (let t = 0; t < nqw; t++) for (let u = 0; u < nkw; u++) { M[t][u] /= count[t]; if (H[t][u]) Z[t][u] = false; }
  const nullSet = new Set(nullRows);
  const wordNull = [];
  for (let t = 0; t < nqw; t++) {
    let all = true;
    for (let i = 0; i < nq; i++) if (qs.word_of[i] === t && !nullSet.has(i)) all = false;
    if (all) wordNull.push(t);
  }
  return {m: M, hidden: H, zero: Z, nullRows: wordNull, qLabels: qs.words, kLabels: ks.words};
}

function kindScale(s, kind, values, view) {
  let top = 0;
  const info = DATA.kinds[kind];
  for (let l = 0; l < info.layers; l++) for (let h = 0; h < info.heads; h++) {
    const r = headMatrix(s, kind, l, h, values, view);
    for (const row of r.m) for (const v of row) if (isFinite(v)) top = Math.max(top, Math.abs(v));
  }
  return top > 0 ? top : 1;
}

function cellColour(r, i, j, top) {
  if (r.hidden[i][j]) return HIDDEN;
  if (r.zero[i][j]) return ZERO;
  const v = r.m[i][j];
  return isFinite(v) ? colour(Math.abs(v) / top) : HIDDEN;
}

function drawHead(canvas, r, top, px) {
  const nq = r.m.length, nk = r.m[0].length, mark = 3;
  canvas.width = nk * px + mark; canvas.height = nq * px;
  const g = canvas.getContext("2d");
  for (let i = 0; i < nq; i++) for (let j = 0; j < nk; j++) {
    g.fillStyle = cellColour(r, i, j, top);
    g.fillRect(mark + j * px, i * px, px, px);
  }
  g.fillStyle = NULLMARK;
  for (const i of r.nullRows) g.fillRect(0, i * px, mark - 1, px);
}

function drawColorbar(canvas) {
  canvas.width = 120; canvas.height = 10;
  const g = canvas.getContext("2d");
  for (let x = 0; x < 120; x++) { g.fillStyle = colour(x / 119); g.fillRect(x, 0, 1, 10); }
}

function fmt(v) { return !isFinite(v) ? "n/a" : (Math.abs(v) >= 100 ? v.toFixed(1) : Math.abs(v) >= 1 ? v.toFixed(3) : v.toFixed(4)); }
function sum(r) { let t = 0; for (const row of r.m) for (const v of row) if (isFinite(v)) t += v; return t; }
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function fixedName(kind, layer, head) {
  const f = DATA.kinds[kind].fixed[String(layer)];
  return f ? f[String(head)] : undefined;
}
function valueName() { return state.values === "alpha" ? "α" : "‖αf(x)‖"; }

function render() {
  const s = DATA.sentences[state.sentence];
  const root = document.getElementById("grids");
  root.textContent = "";
  const pair = document.getElementById("pair");
  pair.textContent = "";
  const src = el("div", {}); src.append(el("b", {}, "source"), document.createTextNode(s.source.words.slice(0, -1).join(" ")));
  const tgt = el("div", {}); tgt.append(el("b", {}, "target"), document.createTextNode(s.decoder_input.words.slice(1).join(" ")));
  pair.append(src, tgt);
  if (s.uncertain_words && state.view === "word")
    pair.append(el("div", {class: "note"}, "This pair has <unk> pieces: their word boundaries are a guess."));
  for (const kind of Object.keys(DATA.kinds)) {
    if (!s.attention[kind]) continue;
    const info = DATA.kinds[kind];
    const sec = el("section", {"data-kind": kind});
    sec.append(el("h2", {}, KIND_NAMES[kind] + " — " + info.layers + " layers × " + info.heads + " heads, " +
                              "activation " + info.activation + (info.output_norm !== "none" ? ", output norm " + info.output_norm : "")));
    const normsHere = info.norms;
    if (state.values === "norm" && !normsHere) sec.append(el("div", {class: "note"}, info.norms_note));
    else if (state.values === "norm" && info.norms_note) sec.append(el("div", {class: "note"}, info.norms_note));
    const top = kindScale(s, kind, state.values, state.view);
    const bar = el("div", {class: "colorbar"});
    const cb = el("canvas", {}); drawColorbar(cb);
    bar.append(el("span", {}, valueName() + ": 0"), cb, el("span", {class: "scale-max"}, fmt(top)),
               el("span", {class: "sub"}, " (one scale for every head of this kind and sentence)"));
    sec.append(bar);
    const table = el("table", {class: "grid"});
    const head = el("tr", {}); head.append(el("th", {}, ""));
    for (let h = 0; h < info.heads; h++) head.append(el("th", {}, "head " + h));
    table.append(head);
    const [qs, ks] = sides(s, kind);
    const nq = state.view === "word" ? qs.words.length : qs.tokens.length;
    const nk = state.view === "word" ? ks.words.length : ks.tokens.length;
    const px = Math.max(2, Math.min(12, Math.floor(140 / Math.max(nq, nk))));
    for (let l = 0; l < info.layers; l++) {
      const tr = el("tr", {}); tr.append(el("th", {}, "layer " + l));
      for (let h = 0; h < info.heads; h++) {
        const r = headMatrix(s, kind, l, h, state.values, state.view);
        const e = s.attention[kind][l];
        const td = el("td", {class: "cellwrap"});
        const cell = el("div", {class: "cell", "data-kind": kind, "data-layer": l, "data-head": h,
                                "data-sum": sum(r).toFixed(4), "data-null-rows": r.nullRows.length,
                                "data-sparsity": e.sparsity[h], title: "click to enlarge"});
        const c = el("canvas", {}); drawHead(c, r, top, px); cell.append(c);
        const inf = el("div", {class: "info"});
        inf.append(document.createTextNode("L" + l + " H" + h + " · " + Math.round(100 * e.sparsity[h]) + "% zero"));
        if (r.nullRows.length) inf.append(document.createTextNode(" · "), el("span", {class: "nulls"}, r.nullRows.length + " null"));
        cell.append(inf);
        const fx = fixedName(kind, l, h);
        if (fx) { const b = el("div", {}); b.append(el("span", {class: "fixed"}, "fixed: " + fx)); cell.append(b); }
        cell.addEventListener("click", () => openHead(kind, l, h));
        td.append(cell); tr.append(td);
      }
      table.append(tr);
    }
    sec.append(table);
    root.append(sec);
  }
  if (state.open) openHead(...state.open);
}

function openHead(kind, layer, head) {
  state.open = [kind, layer, head];
  const s = DATA.sentences[state.sentence];
  const r = headMatrix(s, kind, layer, head, state.values, state.view);
  const top = kindScale(s, kind, state.values, state.view);
  const box = document.getElementById("modal-content");
  box.textContent = "";
  const fx = fixedName(kind, layer, head);
  box.append(el("h3", {}, KIND_NAMES[kind] + ", layer " + layer + ", head " + head + (fx ? " (fixed pattern: " + fx + ")" : "") +
                          " — " + valueName() + ", " + (state.view === "word" ? "words" : "subwords")));
  const e = s.attention[kind][layer];
  box.append(el("div", {class: "sub"}, "sentence " + s.index + " · " + Math.round(100 * e.sparsity[head]) + "% of visible weights exactly 0 · " +
                                      r.nullRows.length + " null rows (red labels) · colour scale 0.." + fmt(top)));
  const [qName, kName] = kind === "encoder_self" ? ["source (query)", "source (key)"] :
                         kind === "decoder_self" ? ["decoder input (query)", "decoder input (key)"] : ["decoder input (query; row r predicts target token r)", "source (key)"];
  box.append(el("div", {class: "axis"}, "rows: " + qName + " · columns: " + kName));
  const bar = el("div", {class: "colorbar"});
  const cb = el("canvas", {}); drawColorbar(cb);
  bar.append(el("span", {}, valueName() + ": 0"), cb, el("span", {}, fmt(top)));
  box.append(bar);
  const t = el("table", {class: "big", id: "big"});
  const hr = el("tr", {}); hr.append(el("th", {}, ""));
  r.kLabels.forEach((k) => hr.append(el("th", {class: "key"}, k)));
  t.append(hr);
  const nulls = new Set(r.nullRows);
  r.m.forEach((row, i) => {
    const tr = el("tr", {});
    tr.append(el("th", {class: "query" + (nulls.has(i) ? " null" : ""), title: nulls.has(i) ? "null row: every visible weight is 0" : ""},
                 (nulls.has(i) ? "∅ " : "") + r.qLabels[i]));
    row.forEach((v, j) => {
      const td = el("td", {class: "v", "data-v": r.hidden[i][j] ? "" : String(v)});
      td.style.background = cellColour(r, i, j, top);
      td.title = r.qLabels[i] + " → " + r.kLabels[j] + ": " + (r.hidden[i][j] ? "not visible" : fmt(v));
      td.addEventListener("mouseenter", () => { document.getElementById("hover").textContent = td.title; });
      tr.append(td);
    });
    t.append(tr);
  });
  box.append(t, el("div", {id: "hover"}, ""));
  document.getElementById("modal").style.display = "block";
}

function closeHead() { state.open = null; document.getElementById("modal").style.display = "none"; }

function setup() {
  document.getElementById("title").textContent = DATA.title;
  const d = DATA.data || {}, p = DATA.provenance || {};
  document.getElementById("meta").textContent =
    (DATA.model ? "checkpoint " + DATA.model.checkpoint + " · " : "") +
    (d.data_bin ? "data " + d.data_bin + (d.split ? " (" + d.split + ")" : "") + " · " : "") +
    DATA.sentences.length + " sentence pairs" + (d.sentences_in_data ? " of " + d.sentences_in_data : "") +
    (p.git_commit ? " · plugin " + p.plugin_version + " @ " + String(p.git_commit).slice(0, 10) : "") +
    (p.date ? " · " + p.date : "");
  const pick = document.getElementById("sentence");
  DATA.sentences.forEach((s, i) => {
    const text = s.source.words.slice(0, -1).join(" ");
    pick.append(el("option", {value: i}, "#" + s.index + ": " + (text.length > 70 ? text.slice(0, 70) + "…" : text)));
  });
  pick.addEventListener("change", () => { state.sentence = Number(pick.value); render(); });
  for (const name of ["values", "view"]) {
    document.querySelectorAll("input[name=" + name + "]").forEach((inp) =>
      inp.addEventListener("change", () => { state[name] = inp.value; render(); }));
  }
  document.getElementById("modal").addEventListener("click", (ev) => { if (ev.target.id === "modal") closeHead(); });
  document.querySelector("#modal .close").addEventListener("click", closeHead);
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape") closeHead(); });
}

function choose(name, value) {
  const inp = [...document.querySelectorAll("input[name=" + name + "]")].find((x) => x.value === value);
  if (!inp) return;
  inp.checked = true;
  inp.dispatchEvent(new Event("change"));
}

function bigMatrix() {
  const rows = [...document.querySelectorAll("#big tr")].slice(1);
  return {
    keys: [...document.querySelectorAll("#big th.key")].map((x) => x.textContent),
    queries: rows.map((tr) => tr.querySelector("th").textContent.replace(/^∅ /, "")),
    values: rows.map((tr) => [...tr.querySelectorAll("td.v")].map((td) => td.dataset.v === "" ? null : Number(td.dataset.v))),
  };
}

function selftest() {
  const out = {cells: {}, expected_cells: {}, tokens: {}};
  for (const kind of Object.keys(DATA.kinds)) {
    out.cells[kind] = document.querySelectorAll(".cell[data-kind=" + kind + "]").length;
    out.expected_cells[kind] = DATA.kinds[kind].layers * DATA.kinds[kind].heads;
  }
  const sums = () => [...document.querySelectorAll(".cell")].map((c) => Number(c.dataset.sum));
  out.alpha_sums = sums();
  choose("values", "norm"); out.norm_sums = sums();
  choose("values", "alpha"); out.alpha_sums_again = sums();
  // the last head of the last layer of every kind, enlarged, in the four views
  out.opened = {};
  for (const kind of Object.keys(DATA.kinds)) {
    const layer = DATA.kinds[kind].layers - 1, head = DATA.kinds[kind].heads - 1;
    document.querySelector(".cell[data-kind=" + kind + "][data-layer='" + layer + "'][data-head='" + head + "']").click();
    const o = {layer: layer, head: head, modal_visible: document.getElementById("modal").style.display === "block",
               heading: document.querySelector("#modal h3").textContent};
    o.alpha_subword = bigMatrix();
    choose("values", "norm"); o.norm_subword = bigMatrix();
    choose("view", "word"); o.norm_word = bigMatrix();
    choose("values", "alpha"); o.alpha_word = bigMatrix();
    choose("view", "subword");
    closeHead();
    out.opened[kind] = o;
  }
  out.fixed_labels = [...document.querySelectorAll(".cell .fixed")].map((x) => {
    const c = x.closest(".cell");
    return [c.dataset.kind, Number(c.dataset.layer), Number(c.dataset.head), x.textContent];
  });
  out.pair_text = document.getElementById("pair").textContent;
  // the sentence picker: the last sentence, then back to the first
  const pick = document.getElementById("sentence");
  out.picker_options = pick.options.length;
  pick.value = String(DATA.sentences.length - 1); pick.dispatchEvent(new Event("change"));
  out.picked_pair_text = document.getElementById("pair").textContent;
  out.picked_sums = sums();
  pick.value = "0"; pick.dispatchEvent(new Event("change"));
  const pre = el("pre", {id: "selftest-result"}, JSON.stringify(out));
  document.body.append(pre);
}

function fromHash() {
  const h = location.hash.slice(1);
  if (h === "selftest") { selftest(); return; }
  const params = new URLSearchParams(h);
  if (params.get("values")) choose("values", params.get("values"));
  if (params.get("view")) choose("view", params.get("view"));
  if (params.get("sentence")) { document.getElementById("sentence").value = params.get("sentence"); state.sentence = Number(params.get("sentence")); render(); }
  if (params.get("open")) {
    const [k, l, hh] = params.get("open").split("/");
    const info = DATA.kinds[k];
    if (info && Number(l) >= 0 && Number(l) < info.layers && Number(hh) >= 0 && Number(hh) < info.heads) openHead(k, Number(l), Number(hh));
  }
}

setup();
render();
fromHash();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>__TITLE__ — attention explorer</title>
<style>__CSS__</style>
</head>
<body>
<h1 id="title"></h1>
<div class="sub" id="meta"></div>
<div id="controls">
  <label>sentence <select id="sentence"></select></label>
  <span>values:
    <label><input type="radio" name="values" value="alpha" checked> weights α</label>
    <label><input type="radio" name="values" value="norm"> norms ‖αf(x)‖</label></span>
  <span>tokens:
    <label><input type="radio" name="view" value="subword" checked> subwords</label>
    <label><input type="radio" name="view" value="word"> words</label></span>
</div>
<div class="legend">
  <span><span class="swatch" style="background:#fff"></span>exactly 0</span>
  <span><span class="swatch" style="background:#d0d0d0"></span>not visible (causal mask)</span>
  <span><span class="swatch" style="background:#d00000"></span>null row (every visible weight 0)</span>
  <span><span class="fixed" style="font-size:10px;color:#fff;background:#8250df;border-radius:3px;padding:0 3px">fixed: name</span> fixed-pattern head</span>
  <span>Layers and heads are numbered from 0 (as <code>fsa-analyze --layer</code> and the demo heatmap).
  Click a head to enlarge it.</span>
</div>
<div class="pair" id="pair"></div>
<div id="grids"></div>
<div id="modal"><div class="box"><button class="close" title="close (Esc)">×</button><div id="modal-content"></div></div></div>
<script type="application/json" id="fsa-data">__DATA__</script>
<script>__JS__</script>
</body>
</html>
"""


def embed_json(data: Dict) -> str:
    """Compact JSON that is safe inside ``<script>``: ``</`` written as ``<\\/``."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("</", "<\\/")


def render(data: Dict) -> str:
    """The whole page for :func:`.explorer.explorer_data`'s ``data``."""
    return (
        _PAGE.replace("__TITLE__", html.escape(str(data.get("title", ""))))
        .replace("__CSS__", _CSS)
        .replace("__JS__", _JS)
        .replace("__DATA__", embed_json(data))
    )


def embedded_data(page: str) -> Dict:
    """The data embedded in a page written by :func:`render` (tests, scripts)."""
    start = page.index('<script type="application/json" id="fsa-data">') + len(
        '<script type="application/json" id="fsa-data">'
    )
    end = page.index("</script>", start)
    return json.loads(page[start:end])
