/* Node page: the GPU x GPU matrix as a heatmap (row: source GPU, column: destination), one figure at a time. */
"use strict";
(function () {
  const el = document.getElementById("gpu-matrix-data");
  if (!el) return;
  const m = JSON.parse(el.textContent);
  const names = m.gpus.map((g) => `GPU ${g}`);
  const figures = [
    ["p2p_gbps", "P2P copy, GB/s"],
    ["p2p_off_gbps", "P2P forced off, GB/s"],
    ["nccl_busbw_gbps", "NCCL busbw, GB/s"],
  ];
  const hover = m.link.map((row, i) => row.map((link, j) => (i === j ? "" :
    `${names[i]} → ${names[j]}: ${link || "?"}${m.nvlink_lanes[i][j] != null ? `, ${m.nvlink_lanes[i][j]} NVLink lanes` : ""}`)));
  const trace = (key, title, visible) => ({
    type: "heatmap", x: names, y: names, z: m[key], text: hover, visible, colorscale: "Viridis", zmin: 0,
    hoverongaps: false, colorbar: { title: { text: title } }, hovertemplate: `%{text}<br>%{z:.1f} GB/s<extra>${title}</extra>`,
  });
  const buttons = figures.map(([, title], k) => ({
    label: title, method: "restyle", args: ["visible", figures.map((_, j) => j === k)],
  }));
  Plotly.newPlot("gpu-matrix", figures.map(([key, title], k) => trace(key, title, k === 0)), {
    height: 420, margin: { t: 40, r: 10, l: 60, b: 50 },
    xaxis: { title: { text: "destination" }, side: "bottom" }, yaxis: { title: { text: "source" }, autorange: "reversed" },
    updatemenus: [{ type: "buttons", direction: "right", x: 0, y: 1.12, xanchor: "left", buttons }],
  }, { displaylogo: false, responsive: true });
})();
