/* Pair page: bandwidth per message size of one probe, and the pair's busbw trend over sweeps. */
"use strict";
(function () {
  const sizes = JSON.parse(document.getElementById("sizes-data").textContent) || [];
  const trend = JSON.parse(document.getElementById("trend-data").textContent) || [];
  // Anchored as the heatmaps: 0 to the fleet's expected busbw (history.js), the same axis on every pair's page.
  const scale = JSON.parse(document.getElementById("history-scale").textContent);
  const cfg = { displaylogo: false, responsive: true };
  const human = (b) => (b >= 1 << 20 ? `${b / (1 << 20)} MiB` : b >= 1024 ? `${b / 1024} KiB` : `${b} B`);
  if (sizes.length) {
    Plotly.newPlot("sizes-plot", [
      { x: sizes.map((s) => s.bytes), y: sizes.map((s) => s.busbw_gbps), name: "busbw", mode: "lines+markers",
        text: sizes.map((s) => human(s.bytes)), hovertemplate: "%{text}: %{y:.3f} GB/s<extra>busbw</extra>" },
      { x: sizes.map((s) => s.bytes), y: sizes.map((s) => s.algbw_gbps), name: "algbw", mode: "lines+markers", line: { dash: "dot" },
        text: sizes.map((s) => human(s.bytes)), hovertemplate: "%{text}: %{y:.3f} GB/s<extra>algbw</extra>" },
    ], { xaxis: { type: "log", title: { text: "message size (bytes)" } }, yaxis: { title: { text: "GB/s" }, rangemode: "tozero" },
         margin: { t: 10, r: 10 }, height: 300, legend: { orientation: "h" } }, cfg);
  } else {
    document.getElementById("sizes-plot").innerHTML = '<p class="muted">No bandwidth measured in this probe (connectivity sweep, or it stopped earlier).</p>';
  }
  if (trend.length) {
    const failed = trend.filter((p) => p.failed);
    const why = (p) => `sweep #${p.sweep}: ${p.status}${p.stage ? ` at ${p.stage}` : ""}${p.reason ? ` (${p.reason})` : ""}`;
    Plotly.newPlot("trend-plot", [{
      // A probe that measured no bandwidth (a connectivity sweep, or one that stopped earlier) is a gap, not 0 GB/s.
      x: trend.map((p) => p.t), y: trend.map((p) => p.busbw_gbps), mode: "lines+markers", connectgaps: false, name: "busbw",
      marker: { size: 10, color: trend.map((p) => CH.STATUS_COLORS[p.status] || "#999"), line: { color: "#333", width: 1 } },
      text: trend.map((p) => `sweep #${p.sweep}: ${p.status}`), hovertemplate: "%{text}<br>%{y:.3f} GB/s<extra></extra>",
    }, {
      // A probe that did not work is marked on the time axis (a cross at the foot), never left out.
      x: failed.map((p) => p.t), y: failed.map(() => 0), mode: "markers", name: "did not work",
      marker: { symbol: "x-thin-open", size: 14, line: { width: 3 }, color: failed.map((p) => CH.STATUS_COLORS[p.status] || "#999") },
      text: failed.map(why), hovertemplate: "%{text}<br>no bandwidth<extra></extra>",
    }], { yaxis: { title: { text: "busbw (GB/s)" }, ...CH.historyAxis(scale, trend.map((p) => p.busbw_gbps)) },
          xaxis: { title: { text: `finished (${trend[trend.length - 1].zone})` } }, shapes: CH.expectedLine(scale, "y"), annotations: CH.expectedNote(scale, "y"),
          margin: { t: 30, r: 10 }, height: 300,
          showlegend: failed.length > 0, legend: { orientation: "h", x: 0, y: 1.12 } }, cfg)
      .then(() => { document.getElementById("trend-plot").dataset.drawn = String(trend.length); });
  }
})();
