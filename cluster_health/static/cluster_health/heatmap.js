/* Heatmaps of a sweep: reachability, throughput (busbw), latency; and the diff of two sweeps.
 *
 * Data arrive as the compact payload of cluster_health/core/matrix.py: node names in
 * natural order and base64 typed arrays over the upper triangle (i < j). One
 * plotly heatmap per view (a canvas image, no per-cell DOM), hover through one
 * tooltip element, live updates applied in place and redrawn at most once per
 * animation frame.
 */
"use strict";

const CH = (window.CH = window.CH || {});

// Okabe-Ito: distinguishable with the common colour-vision deficiencies.
CH.STATUS_COLORS = {
  untested: "#eeeeee", pending: "#bbbbbb", running: "#56b4e9", ok: "#009e73",
  degraded: "#f0e442", failed: "#d55e00", timeout: "#cc79a7", offline: "#000000", skipped: "#0072b2",
  // transient: bad once, fine when probed again: a pale green, near ok and far from every failure colour.
  transient: "#99d8c9", contended: "#999999",
};
// A fail or warn finding marks the pairs it names; an info one (what the confirmation pass cleared) does not.
CH.MARKING_SEVERITIES = ["fail", "warn"];
// Statuses that have no figure to plot: on the throughput and latency views their cells keep
// their status colour, marked with a cross, so a failed pair or a dead node never turns blank.
CH.KEPT_ON_FIGURES = ["failed", "timeout", "offline"];
/* The cells a finding is about: the pairs it rests on, else the link ("a<->b") or the node it names. */
CH.findingCells = function (f) {
  if (f.pairs && f.pairs.length) return { pairs: f.pairs, nodes: [] };
  if (String(f.subject).includes("<->")) return { pairs: [f.subject], nodes: [] };
  return { pairs: [], nodes: [f.subject] };
};
/* Figures of a view that set its colour range: the finite values of the cells keep(k) accepts, at most
 * 4,096 of them taken evenly (a 1,024-node matrix has 523,776 cells; a median needs no more). */
CH.sampleFigures = function (values, keep) {
  const picked = [];
  for (let k = 0; k < values.length; k++) if (keep(k) && Number.isFinite(values[k])) picked.push(values[k]);
  const step = Math.max(1, Math.ceil(picked.length / 4096));
  return step === 1 ? picked : picked.filter((_, n) => n % step === 0);
};
CH.median = function (xs) {
  if (!xs.length) return null;
  const s = Float64Array.from(xs).sort(), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
// The latency scale is darkest at this many times the sweep's median healthy latency: noise (one pair
// at 1.7x its peers) reads a shade darker, not darkest; a link several times slower reads dark.
CH.LATENCY_SPAN = 3;
CH.DIFF_COLORS = { absent: "#eeeeee", same: "#d9d9d9", broke: "#d55e00", fixed: "#009e73", changed: "#e69f00",
  regressed: CH.STATUS_COLORS.degraded, transient: CH.STATUS_COLORS.transient };

CH.decode = function (b64, Type) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
};

CH.pairIndex = function (i, j, n) {
  if (i > j) { const t = i; i = j; j = t; }
  return (i * (2 * n - i - 1)) / 2 + (j - i - 1);
};

CH.naturalKey = function (name) {
  return name.split(/(\d+)/).map((p) => (/^\d+$/.test(p) ? p.padStart(12, "0") : p.toLowerCase())).join("");
};

CH.discreteScale = function (codes, colors) {
  const n = codes.length, scale = [];
  codes.forEach((c, i) => { scale.push([i / n, colors[c]]); scale.push([(i + 1) / n, colors[c]]); });
  return scale;
};

CH.esc = function (s) {
  return String(s == null ? "" : s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
};

CH.fmt = function (v, digits) {
  return v == null || Number.isNaN(v) ? "–" : Number(v).toFixed(digits);
};

/* Display order of the nodes: natural order, grouped by each node's given group (a drill-down's),
 * else optionally by a hostname pattern (rack). */
CH.displayOrder = function (nodes, pattern, given) {
  const idx = nodes.map((_, i) => i);
  let groups = nodes.map(() => "");
  if (given && given.length === nodes.length) {
    groups = given;
  } else if (pattern) {
    let re = null;
    try { re = new RegExp(pattern); } catch (e) { re = null; }
    if (re) groups = nodes.map((n) => { const m = n.match(re); return m ? (m[1] !== undefined ? m[1] : m[0]) : "~"; });
  }
  idx.sort((a, b) => {
    const ga = CH.naturalKey(groups[a]), gb = CH.naturalKey(groups[b]);
    return ga < gb ? -1 : ga > gb ? 1 : a - b;
  });
  const bounds = [];
  for (let r = 1; r < idx.length; r++) if (groups[idx[r]] !== groups[idx[r - 1]]) bounds.push(r);
  return { order: idx, bounds, groups };
};

/* One heatmap in a div: z built from a triangle array through the display order. */
class MatrixPlot {
  constructor(el, opts) {
    this.el = el;
    // {kind: "discrete"|"continuous", codes, colors, colorscale, zmin, zmax, zmid, title, hover(i,j), click(i,j),
    //  index(i,j,n) (default CH.pairIndex), diagonal (cells (i, i) hold values: a group matrix),
    //  overlay {values, codes, colors, kept}: cells whose status is in kept drawn in that status's colour
    //  over a continuous map (their figure is missing), mark(i, j): a glyph drawn in cell (i, j), or ""}
    this.opts = opts;
    this.lit = [];
    this.revision = 0;
    this.tooltip = document.createElement("div");
    this.tooltip.className = "tooltip";
    this.tooltip.hidden = true;
    document.body.appendChild(this.tooltip);
  }

  setData(nodes, values, order, bounds) {
    this.nodes = nodes;
    this.values = values; // typed array over the triangle
    this.order = order;
    this.bounds = bounds || [];
    const n = nodes.length;
    const index = this.opts.index || CH.pairIndex, diagonal = !!this.opts.diagonal;
    const over = this.opts.overlay;
    this.z = [];
    this.overZ = over ? [] : null;
    for (let r = 0; r < n; r++) {
      const row = new Float32Array(n);
      const overRow = over ? new Float32Array(n) : null;
      const i = order[r];
      for (let c = 0; c < n; c++) {
        const j = order[c];
        const off = i === j && !diagonal;
        row[c] = off ? NaN : values[index(i, j, n)];
        if (over) overRow[c] = off ? NaN : this.overValue(over.values[index(i, j, n)]);
      }
      this.z.push(row);
      if (over) this.overZ.push(overRow);
    }
    this.pos = new Int32Array(n);
    order.forEach((node, r) => { this.pos[node] = r; });
  }

  /* A status code as the overlay draws it: itself where the status is kept, else NaN (transparent). */
  overValue(code) {
    const over = this.opts.overlay;
    return over.kept.includes(over.codes[code]) ? code : NaN;
  }

  /* Write one pair's value (and, over a figure, its status code) into z without rebuilding it. */
  setCell(i, j, value, status) {
    const r = this.pos[i], c = this.pos[j];
    this.z[r][c] = value;
    this.z[c][r] = value;
    if (this.overZ && status !== undefined) {
      const v = this.overValue(status);
      this.overZ[r][c] = v;
      this.overZ[c][r] = v;
    }
  }

  /* The overlay trace: kept statuses in their colours, each marked with a cross where labels fit. */
  overlayTrace() {
    const o = this.opts.overlay;
    const marks = this.nodes.length <= 64 ? this.overZ.map((row) => Array.from(row, (v) => (Number.isNaN(v) ? "" : "×"))) : null;
    const t = { type: "heatmap", z: this.overZ, hoverinfo: "none", xgap: 0, ygap: 0, name: "status",
      zmin: -0.5, zmax: o.codes.length - 0.5, colorscale: CH.discreteScale(o.codes, o.colors), showscale: false };
    if (marks) Object.assign(t, { text: marks, texttemplate: "%{text}", textfont: { color: "#ffffff", size: 13 } });
    return t;
  }

  traces() {
    return this.overZ ? [this.trace(), this.overlayTrace()] : [this.trace()];
  }

  /* Each cell's glyph from opts.mark, where labels fit (a glyph in a cell of a 1,000-node matrix is a speck). */
  markText() {
    const n = this.nodes.length, mark = this.opts.mark;
    if (!mark || n > 64) return null;
    return this.order.map((i) => this.order.map((j) => (i === j && !this.opts.diagonal ? "" : mark(i, j))));
  }

  trace() {
    const o = this.opts;
    const t = { type: "heatmap", z: this.z, hoverinfo: "none", xgap: 0, ygap: 0 };
    const marks = this.markText();
    // Without a colour, plotly picks black or white against each cell's own colour.
    if (marks) Object.assign(t, { text: marks, texttemplate: "%{text}", textfont: o.markColor ? { color: o.markColor, size: 14 } : { size: 12 } });
    if (o.kind === "discrete") {
      Object.assign(t, { zmin: -0.5, zmax: o.codes.length - 0.5, colorscale: CH.discreteScale(o.codes, o.colors), showscale: false });
    } else {
      Object.assign(t, { colorscale: o.colorscale, reversescale: !!o.reversescale,
        colorbar: { title: { text: o.unit, side: "right" }, thickness: 12 } });
      // plotly honours zmin only beside a zmax: both, or neither. zmax may be worked out at each draw.
      const zmax = typeof o.zmax === "function" ? o.zmax() : o.zmax;
      if (o.zmin != null && zmax != null && zmax > o.zmin) Object.assign(t, { zmin: o.zmin, zmax });
      if (o.zmid != null) t.zmid = o.zmid;
    }
    return t;
  }

  layout() {
    const n = this.nodes.length;
    const labels = n <= 64;
    const text = this.order.map((i) => this.nodes[i]);
    const ticks = labels ? { tickmode: "array", tickvals: text.map((_, r) => r), ticktext: text } : { showticklabels: false };
    const shapes = this.bounds.map((b) => [
      { type: "line", x0: b - 0.5, x1: b - 0.5, y0: -0.5, y1: n - 0.5, line: { color: "#333", width: 1 } },
      { type: "line", y0: b - 0.5, y1: b - 0.5, x0: -0.5, x1: n - 0.5, line: { color: "#333", width: 1 } },
    ]).flat().concat(this.litShapes());
    // The colour bar of a continuous map takes 80 px beside the square: both fit the div, so the page never scrolls sideways.
    const bar = this.opts.kind === "discrete" ? 0 : 80;
    const side = Math.max(200, Math.min(560, (this.el.clientWidth || 560 + bar) - bar));
    return {
      datarevision: this.revision, width: side + bar, height: side,
      margin: { l: labels ? 90 : 20, r: 10, t: 10, b: labels ? 90 : 20 }, shapes,
      xaxis: Object.assign({ constrain: "domain", scaleanchor: "y", showgrid: false, zeroline: false, tickangle: -60, fixedrange: n <= 64 }, ticks),
      yaxis: Object.assign({ autorange: "reversed", showgrid: false, zeroline: false, fixedrange: n <= 64 }, ticks),
      plot_bgcolor: "#ffffff", paper_bgcolor: "#ffffff", font: { size: 11 },
    };
  }

  /* Outlines around the lit cells (a finding's pairs), both halves of the symmetric matrix. */
  litShapes() {
    return this.lit.flatMap(([i, j]) => {
      const r = this.pos[i], c = this.pos[j];
      const box = (x, y) => ({ type: "rect", name: "lit", x0: x - 0.5, x1: x + 0.5, y0: y - 0.5, y1: y + 0.5,
        line: { color: "#0072b2", width: 3 }, fillcolor: "rgba(0, 114, 178, 0.15)" });
      return r === c ? [box(c, r)] : [box(c, r), box(r, c)];
    });
  }

  /* Light these cells (pairs of node indexes), or none, and redraw. */
  light(cells) {
    this.lit = cells;
    return this.draw();
  }

  draw() {
    this.revision++;
    const started = performance.now();
    const done = Plotly.react(this.el, this.traces(), this.layout(), { displaylogo: false, responsive: false,
      modeBarButtonsToRemove: ["select2d", "lasso2d"] });
    if (!this.bound) {
      this.bound = true;
      this.el.on("plotly_hover", (ev) => this.hover(ev));
      this.el.on("plotly_unhover", () => { this.tooltip.hidden = true; });
      this.el.on("plotly_click", (ev) => {
        const p = ev.points[0];
        const i = this.order[p.pointIndex[0]], j = this.order[p.pointIndex[1]];
        if ((i !== j || this.opts.diagonal) && this.opts.click) this.opts.click(i, j);
      });
    }
    return done.then(() => { this.el.dataset.drawnMs = String(performance.now() - started); this.el.dataset.revision = String(this.revision); });
  }

  hover(ev) {
    const p = ev.points[0];
    const i = this.order[p.pointIndex[0]], j = this.order[p.pointIndex[1]];
    if (i === j && !this.opts.diagonal) { this.tooltip.hidden = true; return; }
    this.tooltip.innerHTML = this.opts.hover(i, j);
    this.tooltip.hidden = false;
    const e = ev.event;
    this.tooltip.style.left = e.pageX + 14 + "px";
    this.tooltip.style.top = e.pageY + 14 + "px";
  }
}
CH.MatrixPlot = MatrixPlot;

/* A panel's view tabs: the buttons in root carrying data-<key> (dataset ``key``). A click calls show(view);
 * pick(view) marks that view's button active and keeps the view in localStorage under ``store``,
 * where the next page starts from (``initial``, else ``fallback``). */
class ViewTabs {
  constructor(root, key, store, fallback, show) {
    this.root = root;
    this.key = key;
    this.selector = `[data-${key.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase())}]`;
    this.store = store;
    this.initial = localStorage.getItem(store) || fallback;
    root.querySelectorAll(this.selector).forEach((b) => b.addEventListener("click", () => show(b.dataset[key])));
  }

  pick(view) {
    localStorage.setItem(this.store, view);
    this.root.querySelectorAll(this.selector).forEach((b) => b.classList.toggle("active", b.dataset[this.key] === view));
    return view;
  }
}

/* A sweep's three heatmaps, fed by state.json and by WebSocket frames. */
class SweepMatrix {
  constructor(root, opts) {
    this.root = root;
    this.opts = opts; // {pairUrl(a, b), onState(state), onFrame(frame)}
    this.tabs = new ViewTabs(root, "view", "ch.view", "status", (view) => this.show(view));
    this.view = this.tabs.initial;
    this.pattern = localStorage.getItem("ch.group") || "";
    this.plotEl = root.querySelector(".plot");
    this.legendEl = root.querySelector(".legend");
    const groupInput = root.querySelector("input[name=group]");
    if (groupInput) {
      groupInput.value = this.pattern;
      groupInput.addEventListener("change", () => { this.pattern = groupInput.value.trim(); localStorage.setItem("ch.group", this.pattern); this.reorder(); });
    }
    this.frameQueued = false;
  }

  load(m) {
    this.root.hidden = false;
    this.nodes = m.nodes;
    this.codes = m.status_codes;
    this.open = new Set(m.open_statuses); // statuses a final result never goes back to
    this.index = new Map(m.nodes.map((n, i) => [n, i]));
    this.status = CH.decode(m.status, Uint8Array);
    this.busbw = CH.decode(m.busbw_gbps, Float32Array);
    this.latency = CH.decode(m.latency_us, Float32Array);
    this.details = m.details || {};
    this.memberGroups = m.member_groups || null; // a drill-down: each node's group, drawn apart
    return this.reorder();
  }

  /* No node matrix for this sweep (it has more nodes than a node matrix shows): the group panel stands in. */
  clear() {
    this.nodes = null;
    this.root.hidden = true;
    if (this.plot) { Plotly.purge(this.plotEl); this.plot = null; }
  }

  reorder() {
    if (!this.nodes) return Promise.resolve();
    const d = CH.displayOrder(this.nodes, this.pattern, this.memberGroups);
    this.order = d.order; this.bounds = d.bounds;
    return this.show(this.view);
  }

  plotOptions(view) {
    const hover = (i, j) => this.hoverText(i, j);
    const click = (i, j) => { if (this.opts.pairUrl) window.location = this.opts.pairUrl(this.nodes[i], this.nodes[j]); };
    const overlay = { values: this.status, codes: this.codes, colors: CH.STATUS_COLORS, kept: CH.KEPT_ON_FIGURES };
    // "!" on exactly the pairs a fail or warn finding names, whatever their status: a slow node's green
    // links never read "all well", and a failure a finding names carries the same mark as the rest of it.
    const mark = (i, j) => (this.findingsAt(i, j).some((f) => CH.MARKING_SEVERITIES.includes(f.severity)) ? "!" : "");
    if (view === "busbw") return { kind: "continuous", colorscale: "Viridis", unit: "GB/s", zmin: 0, zmax: () => this.scaleTop("busbw").value, overlay, hover, click };
    if (view === "latency") return { kind: "continuous", colorscale: "Cividis", reversescale: true, unit: "µs", zmin: 0, zmax: () => this.scaleTop("latency").value, overlay, hover, click };
    return { kind: "discrete", codes: this.codes, colors: CH.STATUS_COLORS, mark, hover, click };
  }

  /* The fleet's expected busbw (state.json's expected_busbw_gbps: its baseline), or null. */
  setExpected(gbps) {
    this.expectedBusbw = gbps || null;
  }

  /* The top of a figure view's colour range, whose bottom is 0, so a colour means the same figure from
   * sweep to sweep: busbw up to the fleet's expected busbw, else the fastest healthy (ok) pair; latency
   * up to CH.LATENCY_SPAN times the median latency of the healthy pairs. {value, why}; value null with
   * nothing measured. */
  scaleTop(view) {
    const ok = this.codes.indexOf("ok");
    const healthy = (k) => this.status[k] === ok;
    if (view === "busbw") {
      if (this.expectedBusbw) return { value: this.expectedBusbw, why: "the fleet's expected busbw (its baseline)" };
      let fastest = null;
      for (let k = 0; k < this.busbw.length; k++) if (healthy(k) && Number.isFinite(this.busbw[k])) fastest = Math.max(fastest || 0, this.busbw[k]);
      return { value: fastest, why: "the fastest healthy pair" };
    }
    const mid = CH.median(CH.sampleFigures(this.latency, healthy));
    return { value: mid ? CH.LATENCY_SPAN * mid : null, why: `${CH.LATENCY_SPAN} x the healthy pairs' median` };
  }

  /* The sweep's findings, indexed by the cells they are about (CH.findingCells): read by the tooltip and the marks. */
  setFindings(findings) {
    this.findingsByPair = new Map();
    this.findingsByNode = new Map();
    const add = (map, key, f) => { if (!map.has(key)) map.set(key, []); map.get(key).push(f); };
    for (const f of findings || []) {
      const c = CH.findingCells(f);
      c.pairs.forEach((p) => { const [a, b] = p.split("<->"); add(this.findingsByPair, `${a}<->${b}`, f); add(this.findingsByPair, `${b}<->${a}`, f); });
      c.nodes.forEach((n) => add(this.findingsByNode, n, f));
    }
    if (this.nodes && this.status) this.renderLegend();
  }

  /* The findings about pair (i, j): those resting on it, naming its link, or naming one of its nodes. */
  findingsAt(i, j) {
    if (!this.findingsByPair) return [];
    const a = this.nodes[i], b = this.nodes[j];
    const found = [...(this.findingsByPair.get(`${a}<->${b}`) || []), ...(this.findingsByNode.get(a) || []), ...(this.findingsByNode.get(b) || [])];
    return [...new Set(found)];
  }

  valuesFor(view) {
    if (view === "busbw") return this.busbw;
    if (view === "latency") return this.latency;
    return this.status;
  }

  show(view) {
    this.view = this.tabs.pick(view);
    if (this.plot) Plotly.purge(this.plotEl);
    if (this.plot) this.plot.tooltip.remove();
    this.plot = new MatrixPlot(this.plotEl, this.plotOptions(view));
    this.plot.setData(this.nodes, this.valuesFor(view), this.order, this.bounds);
    this.plot.lit = this.litCells || [];
    this.renderLegend();
    return this.plot.draw();
  }

  /* Each view its own legend: the statuses with their counts on the status view; on a figure view,
   * what its colour scale means and the statuses that keep their colour there. */
  renderLegend() {
    if (!this.legendEl) return;
    const counts = {};
    this.codes.forEach((c) => { counts[c] = 0; });
    for (let k = 0; k < this.status.length; k++) counts[this.codes[this.status[k]]]++;
    const swatch = (c) => `<span class="swatch-item" data-status="${c}"><i class="swatch" style="background:${CH.STATUS_COLORS[c]}"></i>${c} <b>${counts[c]}</b></span>`;
    this.legendEl.dataset.view = this.view;
    if (this.view === "status") {
      // The statuses on the figure, the failures first under their total: a timed-out or offline pair
      // is a failure too, so "failed 0" never stands beside a pink cell.
      const present = this.codes.filter((c) => counts[c]);
      const failing = present.filter((c) => CH.KEPT_ON_FIGURES.includes(c));
      const total = failing.reduce((n, c) => n + counts[c], 0);
      const marked = this.findingsByPair && (this.findingsByPair.size || this.findingsByNode.size) ? ' <span class="muted">! a fail or warn finding names this pair: hover it.</span>' : "";
      this.legendEl.innerHTML = `<span class="legend-group" data-failures="${total}">failures <b>${total}</b>${failing.length ? ":" : ""}</span> ` +
        failing.map(swatch).join("") + ' <span class="legend-group">others:</span> ' +
        present.filter((c) => !failing.includes(c)).map(swatch).join("") + marked;
      return;
    }
    const top = this.scaleTop(this.view);
    const range = top.value ? `, from 0 to ${CH.fmt(top.value, this.view === "busbw" ? 2 : 0)} (${top.why})` : "";
    const scale = this.view === "busbw"
      ? `busbw in GB/s${range}: dark purple is slow, yellow is fast`
      : `latency in µs${range}: yellow is quick, dark blue is slow`;
    const kept = CH.KEPT_ON_FIGURES.filter((c) => counts[c]);
    this.legendEl.innerHTML = `<span class="scale-note" data-scale>${scale}.</span>` +
      (kept.length ? ` <span class="muted">No figure, status colour kept (×):</span> ${kept.map(swatch).join("")}` : "") +
      ' <span class="muted">Blank: not measured.</span>';
  }

  /* Light a finding's cells: "a<->b" pair names, or a node's every pair. Unknown names are left out. */
  light(pairNames, nodes) {
    const cells = [];
    if (this.nodes) {
      for (const name of pairNames || []) {
        const [a, b] = name.split("<->");
        const i = this.index.get(a), j = this.index.get(b);
        if (i !== undefined && j !== undefined && i !== j) cells.push([i, j]);
      }
      for (const node of nodes || []) {
        const i = this.index.get(node);
        if (i === undefined) continue;
        this.nodes.forEach((_, j) => { if (j !== i) cells.push([i, j]); });
      }
    }
    this.litCells = cells;
    this.root.dataset.lit = cells.map(([i, j]) => `${this.nodes[i]}<->${this.nodes[j]}`).join(" ");
    return this.plot ? this.plot.light(cells) : Promise.resolve();
  }

  hoverText(i, j) {
    const n = this.nodes.length, k = CH.pairIndex(i, j, n);
    const st = this.codes[this.status[k]];
    const d = this.details[k];
    let html = `<b>${CH.esc(this.nodes[i])} ↔ ${CH.esc(this.nodes[j])}</b><br>status: <b>${st}</b>`;
    if (d) {
      if (d[0]) html += `<br>stage: ${CH.esc(d[0])}`;
      if (d[1]) html += `<br>reason: ${CH.esc(d[1])}`;
      if (d[2]) html += `<br><span class="hint">${CH.esc(d[2])}</span>`;
    }
    html += `<br>busbw: ${CH.fmt(this.busbw[k], 2)} GB/s · latency: ${CH.fmt(this.latency[k], 1)} µs`;
    for (const f of this.findingsAt(i, j)) {
      const text = f.text.length > 160 ? f.text.slice(0, 159) + "…" : f.text;
      html += `<br><span class="sev-${CH.esc(f.severity)}">finding, ${CH.esc(f.severity)}:</span> <b>${CH.esc(f.subject)}</b> ${CH.esc(text)}`;
    }
    return html;
  }

  /* Apply pair dicts (a, b, status, stage, reason, hint, busbw_gbps, latency_us) in place.
   * Returns false if a pair names a node this matrix does not have (the caller re-reads). */
  apply(pairs) {
    if (!this.nodes) return true; // no node matrix drawn: nothing to update
    const n = this.nodes.length;
    for (const p of pairs) {
      const i = this.index.get(p.a), j = this.index.get(p.b);
      if (i === undefined || j === undefined) return false;
      if (i === j) continue;
      const k = CH.pairIndex(i, j, n);
      const code = this.codes.indexOf(p.status);
      if (code < 0) continue;
      const current = this.codes[this.status[k]];
      if (this.open.has(p.status) && !this.open.has(current)) continue; // a late "running" never undoes a result
      this.status[k] = code;
      this.busbw[k] = p.busbw_gbps == null ? NaN : p.busbw_gbps;
      this.latency[k] = p.latency_us == null ? NaN : p.latency_us;
      if ((p.status !== "ok" && !this.open.has(p.status)) || p.hint) this.details[k] = [p.stage, p.reason, p.hint];
      else delete this.details[k];
      if (this.plot) this.plot.setCell(i, j, this.valuesFor(this.view)[k], code);
    }
    this.scheduleDraw();
    return true;
  }

  scheduleDraw() {
    if (this.frameQueued) return;
    this.frameQueued = true;
    requestAnimationFrame(() => {
      this.frameQueued = false;
      this.renderLegend();
      this.plot.draw().then(() => { this.root.dataset.updatedAt = String(Date.now()); });
    });
  }

  statusOf(a, b) {
    if (!this.nodes) return null;
    const i = this.index.get(a), j = this.index.get(b);
    if (i === undefined || j === undefined || i === j) return null;
    return this.codes[this.status[CH.pairIndex(i, j, this.nodes.length)]];
  }
}
CH.SweepMatrix = SweepMatrix;

/* Index of cell (g, h) in a group matrix: the upper triangle with its diagonal (cluster_health/core/groupmatrix.py). */
CH.groupCellIndex = function (g, h, n) {
  if (g > h) { const t = g; g = h; h = t; }
  return (g * (2 * n - g + 1)) / 2 + (h - g);
};

/* The group matrix of a sweep (group x group: worst status, median busbw, failing share) and its
 * drill-down into one cell: the node matrix of that cell's groups, fetched from the API. Shown
 * in place of the node matrix when a sweep has more nodes than a node matrix shows; otherwise
 * folded, and read when opened. Live frames re-read it at most every refreshMs (a group cell's
 * median needs all its pairs); the drill-down's cells are updated in place. */
class GroupPanel {
  constructor(root, opts) {
    this.root = root;
    this.opts = opts; // {groupsUrl(id), drillUrl(id, groups), pairUrl(a, b), refreshMs}
    this.detailsEl = root.querySelector("[data-groups-details]");
    this.plotEl = root.querySelector("[data-groups-plot]");
    this.legendEl = root.querySelector("[data-groups-legend]");
    this.noteEl = root.querySelector("[data-groups-note]");
    this.drillEl = root.querySelector("[data-drill]");
    this.tabs = new ViewTabs(root, "groupView", "ch.groupView", "worst", (view) => this.show(view));
    this.view = this.tabs.initial;
    this.refreshQueued = false;
    this.detailsEl.addEventListener("toggle", () => { if (this.detailsEl.open && !this.data && this.sweepId) this.refresh(); });
    root.querySelector("[data-drill-close]").addEventListener("click", () => this.closeDrill());
  }

  note(text) { this.noteEl.textContent = text || ""; this.noteEl.hidden = !text; }

  loadState(state) {
    if (this.sweepId !== state.sweep) { this.closeDrill(); this.data = null; }
    this.sweepId = state.sweep;
    this.expectedBusbw = state.expected_busbw_gbps || null;
    this.sizeNote = state.matrix ? "" : `This sweep has more nodes than the ${state.node_matrix_max_nodes} a node matrix shows (CLUSTER_HEALTH_NODE_MATRIX_MAX_NODES): click a cell for the nodes of its two groups.`;
    if (state.groups) { this.detailsEl.open = true; return this.load(state.groups); }
    return this.detailsEl.open ? this.refresh() : Promise.resolve();
  }

  refresh() {
    const id = this.sweepId;
    return fetch(this.opts.groupsUrl(id), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((r) => { if (!r.ok) throw new Error(`groups: HTTP ${r.status}`); return r.json(); })
      .then((g) => (id === this.sweepId ? this.load(g) : undefined))
      .catch((err) => { this.note(`The group matrix could not be read (${err.message}); retrying with the next update.`); this.data = null; });
  }

  load(g) {
    this.data = g;
    if (!g.groups) { // more groups than a summary can show: the message says what to do
      this.names = null;
      this.note([this.sizeNote, g.message, g.origin].filter(Boolean).join(" "));
      Plotly.purge(this.plotEl);
      this.legendEl.innerHTML = "";
      return Promise.resolve();
    }
    this.note([this.sizeNote, g.origin].filter(Boolean).join(" ")); // declared, measured or from the names
    this.names = g.groups;
    this.sizes = g.sizes;
    this.codes = g.status_codes;
    this.worst = CH.decode(g.worst, Uint8Array);
    this.pairs = CH.decode(g.pairs, Uint32Array);
    this.tested = CH.decode(g.tested, Uint32Array);
    this.bad = CH.decode(g.bad, Uint32Array);
    this.median = CH.decode(g.busbw_median, Float32Array);
    this.lowest = CH.decode(g.busbw_min, Float32Array);
    this.failing = new Float32Array(this.worst.length);
    for (let k = 0; k < this.failing.length; k++) this.failing[k] = this.tested[k] ? this.bad[k] / this.tested[k] : NaN;
    return this.show(this.view);
  }

  show(view) {
    this.view = this.tabs.pick(view);
    if (!this.names) return Promise.resolve();
    // A cell's colour is its worst pair's status; its text says how many of its probed pairs are bad, so one
    // dead node colours its cells without reading as a whole rack down.
    const mark = (g, h) => { const k = CH.groupCellIndex(g, h, this.names.length); return this.bad[k] ? `${this.bad[k]}/${this.tested[k]}` : ""; };
    const common = { index: CH.groupCellIndex, diagonal: true, mark, hover: (g, h) => this.hoverText(g, h), click: (g, h) => this.drill(g, h) };
    let opts = { kind: "discrete", codes: this.codes, colors: CH.STATUS_COLORS, ...common }, values = this.worst;
    if (view === "busbw") {
      // A cell with no busbw (its pairs all failed, timed out or went offline) keeps its worst status's colour.
      const unmeasured = Uint8Array.from(this.worst, (w, k) => (Number.isNaN(this.median[k]) ? w : 0));
      const overlay = { values: unmeasured, codes: this.codes, colors: CH.STATUS_COLORS, kept: CH.KEPT_ON_FIGURES };
      // Anchored as the node matrix's: 0 to the fleet's expected busbw, else the fastest median.
      const top = () => {
        let fastest = 0;
        for (const v of this.median) if (Number.isFinite(v)) fastest = Math.max(fastest, v);
        return this.expectedBusbw || fastest || null;
      };
      opts = { kind: "continuous", colorscale: "Viridis", unit: "GB/s", zmin: 0, zmax: top, overlay, ...common };
      values = this.median;
    }
    if (view === "failing") {
      opts = { kind: "continuous", colorscale: [[0, "#f7f7f7"], [1, CH.STATUS_COLORS.failed]], unit: "failing", zmin: 0, zmax: 1, ...common };
      values = this.failing;
    }
    if (this.plot) { Plotly.purge(this.plotEl); this.plot.tooltip.remove(); }
    this.plot = new MatrixPlot(this.plotEl, opts);
    this.plot.setData(this.names, values, this.names.map((_, g) => g));
    this.renderLegend();
    return this.plot.draw().then(() => { this.root.dataset.loaded = String(this.sweepId); });
  }

  /* Each view its own legend: the worst statuses on the status view, what the scale means on the others. */
  renderLegend() {
    const counts = {};
    for (const code of this.worst) counts[code] = (counts[code] || 0) + 1;
    const swatches = (codes) => codes.map((c) => { const code = this.codes.indexOf(c); return counts[code]
      ? `<span class="swatch-item" data-status="${c}"><i class="swatch" style="background:${CH.STATUS_COLORS[c]}"></i>${c} <b>${counts[code]}</b></span>` : ""; }).join("");
    this.legendEl.dataset.view = this.view;
    const head = `<span class="muted">${this.names.length} groups, cells marked failing/probed pairs;</span> `;
    if (this.view === "busbw") {
      this.legendEl.innerHTML = head + '<span class="scale-note" data-scale>median busbw in GB/s (scale on the right): dark purple is slow, yellow is fast.</span> ' +
        '<span class="muted">No busbw, worst status kept (×):</span> ' + swatches(CH.KEPT_ON_FIGURES);
    } else if (this.view === "failing") {
      this.legendEl.innerHTML = head + '<span class="scale-note" data-scale>the share of probed pairs failing, timed out or offline (scale on the right): white none, vermillion all.</span>';
    } else {
      this.legendEl.innerHTML = head + '<span class="muted">colour by worst status:</span>' + swatches(this.codes);
    }
  }

  hoverText(g, h) {
    const k = CH.groupCellIndex(g, h, this.names.length);
    const title = g === h ? `inside ${CH.esc(this.names[g])} (${this.sizes[g]} nodes)` : `${CH.esc(this.names[g])} ↔ ${CH.esc(this.names[h])}`;
    return `<b>${title}</b><br>worst: <b>${this.codes[this.worst[k]]}</b>` +
      `<br>${this.pairs[k]} pairs · ${this.tested[k]} probed · ${this.bad[k]} failing` +
      `<br>busbw median ${CH.fmt(this.median[k], 2)} · min ${CH.fmt(this.lowest[k], 2)} GB/s<br><span class="muted">click for its nodes</span>`;
  }

  drill(g, h) {
    const wanted = g === h ? [this.names[g]] : [this.names[g], this.names[h]];
    const id = this.sweepId;
    return fetch(this.opts.drillUrl(id, wanted), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((r) => r.json().then((body) => { if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`); return body; }))
      .then((m) => {
        if (id !== this.sweepId) return undefined;
        this.drillEl.hidden = false;
        this.drillEl.querySelector("[data-drill-title]").textContent = wanted.length === 1 ? `Inside ${wanted[0]}` : `${wanted[0]} ↔ ${wanted[1]}`;
        if (!this.drillMatrix) this.drillMatrix = new CH.SweepMatrix(this.drillEl, { pairUrl: this.opts.pairUrl });
        this.drillMatrix.setExpected(this.expectedBusbw);
        this.drillGroups = wanted;
        return this.drillMatrix.load(m).then(() => { this.root.dataset.drilled = wanted.join(" "); });
      })
      .catch((err) => this.note(`The nodes of ${wanted.join(" and ")} could not be read: ${err.message}`));
  }

  closeDrill() {
    if (this.drillMatrix) this.drillMatrix.clear();
    this.drillGroups = null;
    this.drillEl.hidden = true;
    delete this.root.dataset.drilled;
  }

  /* A live frame's pairs: into the drill-down in place; the group cells by a re-read, at most every refreshMs. */
  onPairs(pairs) {
    if (this.drillGroups && this.drillMatrix && this.drillMatrix.nodes) {
      const index = this.drillMatrix.index;
      const mine = pairs.filter((p) => index.has(p.a) && index.has(p.b));
      if (mine.length) this.drillMatrix.apply(mine);
    }
    if (!this.detailsEl.open || !this.data || this.refreshQueued) return;
    this.refreshQueued = true;
    setTimeout(() => { this.refreshQueued = false; this.refresh(); }, this.opts.refreshMs);
  }
}
CH.GroupPanel = GroupPanel;

/* Follows a sweep live: re-reads state.json on every (re)connect, then applies batched frames. */
class LiveSweep {
  constructor(opts) {
    this.opts = opts; // {stateUrl(id), wsPath, sweepId, matrix, onState, onFrame, followNewest}
    this.sweepId = opts.sweepId;
    this.backoff = 500;
    this.buffer = null;
    this.loadedAt = null;
  }

  start() { this.connect(); if (this.sweepId) this.reload(); }

  static LOGIN_ENDED = [4401, 4403, 4408, 4410]; // close codes of an ended login (web/consumers.py)

  connect() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(`${proto}//${location.host}${this.opts.wsPath}`);
    this.ws = ws;
    this.showState(this.everOpened ? "reconnecting" : "connecting");
    ws.onopen = () => {
      this.backoff = 500;
      this.showState("open");
      if (this.everOpened) {
        window.CH.reconnects = (window.CH.reconnects || 0) + 1;
        if (this.sweepId) this.reload(); // frames sent while away are lost: re-read the state
      }
      this.everOpened = true;
    };
    ws.onmessage = (ev) => this.onMessage(JSON.parse(ev.data));
    ws.onclose = (ev) => {
      if (LiveSweep.LOGIN_ENDED.includes(ev.code)) { this.sessionEnded(); return; }
      this.showState(this.everOpened ? "reconnecting" : "closed");
      document.body.dataset.ws = "closed";
      setTimeout(() => this.connect(), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 8000);
    };
  }

  /* The server closed the socket because the login ended (logged out, expired, user deactivated:
   * cluster_health/web/consumers.py): retrying cannot help, so say so once, with the way back in. */
  sessionEnded() {
    this.showState("ended");
    document.body.dataset.ws = "ended";
    if (document.querySelector("[data-session-ended]")) return;
    const login = `${CH.loginUrl || "/accounts/login/"}?next=${encodeURIComponent(location.pathname)}`;
    const note = document.createElement("ul");
    note.className = "messages";
    note.dataset.sessionEnded = "";
    note.setAttribute("role", "alert");
    note.innerHTML = `<li class="error">Your session ended — <a href="${CH.esc(login)}">sign in again</a> to see live updates.</li>`;
    (document.querySelector("main") || document.body).prepend(note);
  }

  /* The connection state, for tests (CH.wsState, body[data-ws]) and for people (the [data-live] badge,
   * shown only while the sweep on the page is open: a closed sweep no longer changes, so it is not "live"). */
  showState(state) {
    if (state) this.wsState = state;
    window.CH.wsState = this.wsState;
    if (this.wsState === "open") document.body.dataset.ws = "open";
    const words = { open: "live", connecting: "connecting…", reconnecting: "reconnecting…", closed: "offline", ended: "signed out" };
    document.querySelectorAll("[data-live]").forEach((el) => {
      el.textContent = words[this.wsState];
      el.dataset.state = this.wsState;
      el.hidden = this.sweepOpen === false;
    });
  }

  /* Whether the sweep on the page is still open (pending or running): the badge follows it. */
  setOpen(open) {
    this.sweepOpen = open;
    this.showState();
  }

  onMessage(frame) {
    if (frame.type !== "update") return;
    frame.receivedAt = Date.now();
    if (frame.sweep !== this.sweepId) {
      if (this.opts.followNewest && (!this.sweepId || frame.sweep > this.sweepId)) { this.sweepId = frame.sweep; this.reload(); }
      return;
    }
    if (this.buffer) { this.buffer.push(frame); return; } // a state read is in flight
    this.applyFrame(frame);
  }

  applyFrame(frame) {
    if (frame.pairs && frame.pairs.length) {
      if (!this.opts.matrix.apply(frame.pairs)) { this.reload(); return; }
      if (this.opts.groups) this.opts.groups.onPairs(frame.pairs);
    }
    window.CH.lastFrame = { receivedAt: frame.receivedAt, pairs: (frame.pairs || []).length };
    if (this.opts.onFrame) this.opts.onFrame(frame);
  }

  reload() {
    this.buffer = this.buffer || [];
    const started = performance.now();
    return fetch(this.opts.stateUrl(this.sweepId), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((r) => { if (!r.ok) throw new Error(`state: HTTP ${r.status}`); return r.json(); })
      .then((state) => {
        window.CH.fetchMs = performance.now() - started;
        if (state.matrix) this.opts.matrix.load(state.matrix);
        else this.opts.matrix.clear();
        if (this.opts.onState) this.opts.onState(state);
        const draws = [];
        if (this.opts.groups) draws.push(this.opts.groups.loadState(state));
        const frames = this.buffer; this.buffer = null;
        frames.forEach((f) => this.applyFrame(f));
        if (state.matrix) draws.push(this.opts.matrix.plot.draw());
        return Promise.all(draws);
      })
      .then(() => { window.CH.firstDrawMs = window.CH.firstDrawMs || performance.now(); document.body.dataset.loaded = String(this.sweepId); })
      .catch((err) => { this.buffer = null; console.error(err); setTimeout(() => this.reload(), 2000); });
  }
}
CH.LiveSweep = LiveSweep;

/* The diff of two sweeps: status changes and busbw ratio. */
CH.drawDiff = function (root, diff, pairUrl) {
  const nodes = diff.nodes, n = nodes.length;
  const change = CH.decode(diff.change, Uint8Array);
  const ratio = CH.decode(diff.busbw_ratio, Float32Array);
  const hover = (i, j) => {
    const k = CH.pairIndex(i, j, n);
    return `<b>${CH.esc(nodes[i])} ↔ ${CH.esc(nodes[j])}</b><br>status: ${diff.diff_codes[change[k]]}<br>busbw after/before: ${CH.fmt(ratio[k], 2)}`;
  };
  const click = (i, j) => { window.location = pairUrl(nodes[i], nodes[j]); };
  const order = nodes.map((_, i) => i);
  const a = new MatrixPlot(root.querySelector(".plot-change"), { kind: "discrete", codes: diff.diff_codes, colors: CH.DIFF_COLORS, hover, click });
  a.setData(nodes, change, order);
  const legend = root.querySelector(".legend");
  if (legend) legend.innerHTML = diff.diff_codes.map((c) => `<span class="swatch-item"><i class="swatch" style="background:${CH.DIFF_COLORS[c]}"></i>${c}</span>`).join("");
  const ratioEl = root.querySelector(".plot-ratio");
  // A ratio needs busbw on both sides; a sweep that measured none (connectivity, quick, group) leaves nothing to plot.
  if (!ratio.some((v) => Number.isFinite(v))) {
    ratioEl.innerHTML = '<p class="muted nothing-to-compare">Nothing to compare: no pair has a busbw measurement in both sweeps (connectivity, quick and group sweeps measure no bandwidth).</p>';
    ratioEl.classList.add("plot-empty");
    return a.draw();
  }
  const b = new MatrixPlot(ratioEl, { kind: "continuous", colorscale: "RdBu", reversescale: true, zmin: 0, zmax: 2, zmid: 1, unit: "after/before", hover, click });
  b.setData(nodes, ratio, order);
  return Promise.all([a.draw(), b.draw()]);
};
