/* Topology page: the matrix in the tree's leaf order with each inferred group outlined, the tree beside it. */
"use strict";
(function () {
  const el = document.getElementById("topology-plot");
  const data = JSON.parse(document.getElementById("topology-data").textContent);
  const n = data.order.length;
  const idx = [...Array(n).keys()];
  const wrong = new Set(data.mismatched);
  const labels = data.order.map((name) => (wrong.has(name) ? `${name} ⚠` : name));
  const hover = data.order.map((a, i) => data.order.map((b, j) => (i === j ? "" :
    `${a} ↔ ${b}<br>busbw ${CH.fmt(data.busbw[i][j], 2)} GB/s<br>latency ${CH.fmt(data.latency[i][j], 0)} µs`)));
  const heat = {
    type: "heatmap", x: idx, y: idx, z: data.busbw, text: hover, hoverinfo: "text", xaxis: "x2", yaxis: "y",
    colorscale: "Viridis", colorbar: { title: { text: "GB/s" } }, hoverongaps: false,
  };
  // scipy's dendrogram places leaf k at 10k + 5; the heatmap's cell k sits at k.
  const tree = data.tree.x.map((xs, k) => ({
    type: "scatter", mode: "lines", x: xs, y: data.tree.y[k].map((v) => (v - 5) / 10), xaxis: "x", yaxis: "y",
    line: { color: "#555", width: 1 }, hoverinfo: "skip", showlegend: false,
  }));
  const shapes = data.bounds.map((b) => ({
    type: "rect", xref: "x2", yref: "y", x0: b.start - 0.5, x1: b.end + 0.5, y0: b.start - 0.5, y1: b.end + 0.5,
    line: { color: "#d55e00", width: 2 }, fillcolor: "rgba(0,0,0,0)",
  }));
  const notes = data.bounds.map((b) => ({
    xref: "x2", yref: "paper", x: (b.start + b.end) / 2, y: 1.0, yanchor: "bottom", text: b.name, showarrow: false,
  }));
  const ticks = { tickmode: "array", tickvals: idx, ticktext: labels, automargin: true };
  const size = Math.max(420, Math.min(900, 40 + n * 18));
  Plotly.newPlot(el, [...tree, heat], {
    height: size, margin: { t: 40, r: 10 }, shapes, annotations: notes, showlegend: false,
    xaxis: { domain: [0, 0.2], autorange: "reversed", title: { text: "tree height" }, zeroline: false },
    xaxis2: { domain: [0.22, 1], ...ticks, tickangle: -60 },
    yaxis: { ...ticks, autorange: "reversed", range: [n - 0.5, -0.5] },
  }, { displaylogo: false, responsive: true }).then(() => {
    el.dataset.drawn = String(n);
    el.dataset.groups = String(data.bounds.length);
  });
})();
