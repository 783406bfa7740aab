/* History at a glance: busbw over the last sweeps on an anchored axis, for the pair page (pair.js) and the node page.
 * The axis runs from 0 to the fleet's expected busbw (its baseline), as the heatmaps' colour scale does, so a healthy
 * link sits near the top of every chart and a slow one low; a faster figure widens it, never is cut off. */
"use strict";
(function () {
  const CH = window.CH;
  const read = (id) => { const el = document.getElementById(id); return el ? JSON.parse(el.textContent) : null; };

  /* The y axis of busbw: 0 to the anchor (scale.gbps), or to the fastest figure when it is above. */
  CH.historyAxis = function (scale, figures) {
    const top = Math.max(scale && scale.gbps ? scale.gbps : 0, ...figures.filter((f) => f !== null && f !== undefined));
    return top > 0 ? { range: [0, top * 1.08], autorange: false, fixedrange: true } : { rangemode: "tozero" };
  };

  /* The fleet's expected busbw as a dashed line across the chart, when the anchor is one. */
  CH.expectedLine = function (scale, yref) {
    if (!scale || !scale.expected) return [];
    return [{ type: "line", xref: "paper", x0: 0, x1: 1, yref: yref || "y", y0: scale.gbps, y1: scale.gbps,
      line: { color: "#555", width: 1, dash: "dash" } }];
  };

  /* Its label, at the right end of the line. */
  CH.expectedNote = function (scale, yref) {
    if (!scale || !scale.expected) return [];
    return [{ xref: "paper", x: 1, xanchor: "right", yref: yref || "y", y: scale.gbps, yanchor: "bottom", showarrow: false,
      text: `expected ${Number(scale.gbps).toFixed(3)} GB/s`, font: { size: 11, color: "#555" } }];
  };

  const countsText = (p) => `${p.links} link${p.links === 1 ? "" : "s"}: ` +
    Object.entries(p.counts).map(([s, n]) => `${n} ${s}`).join(", ");

  /* The node page: its links' median busbw (line), slowest to fastest (band) and their statuses (stacked bars). */
  function drawNodeHistory() {
    const points = read("node-history-data");
    if (!points || !points.length) return;
    const scale = read("history-scale");
    const x = points.map((p) => `#${p.sweep}`);
    const when = points.map((p) => `sweep #${p.sweep}, ${p.when}`);
    const gb = (v) => (v === null || v === undefined ? "not measured" : `${Number(v).toFixed(3)} GB/s`);
    const band = { color: "rgba(0, 114, 178, 0.18)" };
    const statuses = [...new Set(points.flatMap((p) => Object.keys(p.counts)))];
    const traces = [
      { x, y: points.map((p) => p.low_gbps), mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false, connectgaps: false },
      { x, y: points.map((p) => p.high_gbps), mode: "lines", line: { width: 0 }, fill: "tonexty", fillcolor: band.color,
        name: "slowest to fastest link", hoverinfo: "skip", connectgaps: false },
      { x, y: points.map((p) => p.median_gbps), mode: "lines+markers", name: "median of its links", connectgaps: false,
        line: { color: "#0072b2" }, marker: { size: 8, color: "#0072b2" },
        text: points.map((p, k) => `${when[k]}<br>median ${gb(p.median_gbps)}; slowest ${gb(p.low_gbps)}` +
          `${p.low_peer ? ` (with ${CH.esc(p.low_peer)})` : ""}, fastest ${gb(p.high_gbps)}<br>${CH.esc(countsText(p))}`),
        hovertemplate: "%{text}<extra></extra>" },
      ...statuses.map((s) => ({
        x, y: points.map((p) => p.counts[s] || 0), type: "bar", yaxis: "y2", name: s, showlegend: true,
        marker: { color: CH.STATUS_COLORS[s] || "#999" },
        text: points.map((p, k) => `${when[k]}: ${CH.esc(countsText(p))}`), hovertemplate: "%{text}<extra>" + s + "</extra>",
        textposition: "none",
      })),
    ];
    const layout = {
      height: 340, margin: { t: 30, r: 10, b: 40 }, barmode: "stack", hovermode: "closest",
      legend: { orientation: "h", x: 0, y: 1.14 },
      // One sweep axis under both panels: its labels below the bars, where they do not cover them.
      xaxis: { type: "category", title: { text: "sweep" }, anchor: "y2" },
      yaxis: { domain: [0.34, 1], title: { text: "busbw (GB/s)" }, ...CH.historyAxis(scale, points.map((p) => p.high_gbps)) },
      yaxis2: { domain: [0, 0.24], title: { text: "links" }, rangemode: "tozero", fixedrange: true },
      shapes: CH.expectedLine(scale, "y"), annotations: CH.expectedNote(scale, "y"),
    };
    const el = document.getElementById("node-history-plot");
    const sweepUrl = document.querySelector("[data-sweep-url]").dataset.sweepUrl;
    Plotly.newPlot(el, traces, layout, { displaylogo: false, responsive: true }).then(() => {
      el.on("plotly_click", (ev) => {
        const label = ev.points && ev.points[0] && ev.points[0].x;
        if (label) location.href = sweepUrl.replace("/0/", `/${String(label).slice(1)}/`);
      });
      el.dataset.drawn = String(points.length);
    });
  }

  drawNodeHistory();
})();
