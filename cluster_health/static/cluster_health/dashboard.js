/* Page wiring: the overview and sweep pages share one live heatmap panel. */
"use strict";

(function () {
  const CH = window.CH;
  const OPEN = ["pending", "running"];

  function progressText(p) {
    if (!p) return "";
    const rounds = p.rounds ? `round ${p.round}/${p.rounds} · ` : "";
    const scope = p.scope === "round" ? " in this round" : "";
    // The confirmation pass: the sweep's suspects probed again before its verdict.
    const phase = p.phase === "confirming" ? "confirming · " : "";
    return `${phase}${rounds}${p.pairs_done}/${p.pairs_total} pairs done${scope}${p.failures ? ` · ${p.failures} failing` : ""}`;
  }

  function renderFindings(findings) {
    const list = document.querySelector("[data-findings]");
    if (!list || !findings) return;
    if (!findings.length) { list.innerHTML = '<li class="muted">Nothing to report.</li>'; return; }
    list.innerHTML = findings.map((f) => `<li class="sev-${CH.esc(f.severity)}"><span class="sev">${CH.esc(f.severity)}</span> <b class="subject">${CH.esc(f.subject)}</b> ${CH.esc(f.text)}</li>`).join("");
  }

  function renderTrending(trending) {
    const section = document.querySelector("[data-trending-section]");
    if (!section || !trending) return;
    section.hidden = !trending.length;
    const gbps = (v) => Number(v).toFixed(3);
    section.querySelector("[data-trending]").innerHTML = trending.map((t) => `<li class="sev-warn"><b class="subject">${CH.esc(t.link)}</b> busbw ${gbps(t.from_busbw_gbps)} → ${gbps(t.to_busbw_gbps)} GB/s over ${CH.esc(t.sweeps)} sweeps</li>`).join("");
  }

  function renderMeta(meta) {
    const set = (sel, fn) => document.querySelectorAll(sel).forEach(fn);
    if (meta.status) set("[data-sweep-status]", (el) => { el.textContent = meta.status; el.dataset.value = meta.status; });
    if (meta.verdict) set("[data-verdict]", (el) => { el.textContent = meta.verdict; el.className = `verdict verdict-${meta.verdict}`; });
    if (meta.progress) {
      set("[data-progress]", (el) => { el.textContent = progressText(meta.progress); });
      set("progress[data-progress-bar]", (el) => { el.max = meta.progress.pairs_total || 1; el.value = meta.progress.pairs_done; });
    }
    if (meta.status && !OPEN.includes(meta.status)) set("[data-open-only]", (el) => { el.hidden = true; });
  }

  CH.initSweepPage = function (cfg) {
    const root = document.getElementById("heatmaps");
    const pairUrl = (a, b) => cfg.pairUrl.replace("/A/", `/${encodeURIComponent(a)}/`).replace("/B/", `/${encodeURIComponent(b)}/`);
    const matrix = new CH.SweepMatrix(root, { pairUrl });
    const sweepUrl = (url, id) => url.replace("/sweeps/0/", `/sweeps/${id}/`);
    const groups = new CH.GroupPanel(document.getElementById("groups"), {
      pairUrl, refreshMs: cfg.groupRefreshMs,
      groupsUrl: (id) => sweepUrl(cfg.groupsUrl, id),
      drillUrl: (id, names) => sweepUrl(cfg.matrixUrl, id) + "?" + names.map((g) => `group=${encodeURIComponent(g)}`).join("&"),
    });
    let lastStatus = null;
    const live = new CH.LiveSweep({
      sweepId: cfg.sweepId, wsPath: cfg.wsPath, followNewest: cfg.followNewest, matrix, groups,
      stateUrl: (id) => cfg.stateUrl.replace("/0/", `/${id}/`),
      onState: (state) => {
        lastStatus = state.status;
        renderMeta(state);
        renderFindings(state.findings);
        renderTrending(state.trending_down);
        document.querySelectorAll("[data-sweep-link]").forEach((a) => { a.href = a.href.replace(/\/sweeps\/\d+\//, `/sweeps/${state.sweep}/`); a.textContent = `#${state.sweep}`; });
      },
      onFrame: (frame) => {
        renderMeta(frame);
        // Findings are written when the sweep closes: re-read once at that moment.
        if (frame.status && OPEN.includes(lastStatus) && !OPEN.includes(frame.status)) live.reload();
        if (frame.status) lastStatus = frame.status;
      },
    });
    CH.live = live;
    CH.matrix = matrix;
    CH.groups = groups;
    live.start();
  };
})();
