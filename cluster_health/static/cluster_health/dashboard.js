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
    // The confirmation pass's probes apart from the sweep's pairs (their rows go as the pass ends).
    const again = p.again_total ? ` · ${p.again_done}/${p.again_total} probed again` : "";
    return `${phase}${rounds}${p.pairs_done}/${p.pairs_total} ${p.unit || "pairs"} done${scope}${again}${p.failures ? ` · ${p.failures} failing` : ""}`;
  }

  /* A sweep's findings into list, each with its "why" link (findingUrl(sweep, id)) and the cells it lights. */
  function renderFindings(list, state, findingUrl) {
    if (!list || !state.findings) return;
    if (!state.findings.length) {
      const words = OPEN.includes(state.status) ? "The sweep is still running: findings come when it ends." : "Nothing to report.";
      list.innerHTML = `<li class="muted">${words}</li>`;
      return;
    }
    list.innerHTML = state.findings.map((f) => {
      const cells = CH.esc(JSON.stringify(CH.findingCells(f)));
      const why = f.id ? ` <a class="why" href="${CH.esc(findingUrl(state.sweep, f.id))}">why</a>` : "";
      return `<li class="sev-${CH.esc(f.severity)}" data-finding="${CH.esc(f.id)}" data-cells="${cells}" tabindex="0">` +
        `<span class="sev">${CH.esc(f.severity)}</span> <b class="subject">${CH.esc(f.subject)}</b> ${CH.esc(f.text)}${why}</li>`;
    }).join("");
  }

  /* The sweep's problems (core/problems.py): one line per culprit, opening into its findings (state.problems
   * names them by id). Open lines stay open when the list is drawn again. */
  function renderProblems(section, state, findingUrl) {
    if (!section || !state.problems) return;
    const open = OPEN.includes(state.status);
    section.hidden = open && !state.problems.length;
    const n = state.problems.length;
    section.querySelector("[data-problems-title]").textContent = n ? `${n} problem${n === 1 ? "" : "s"}` : "No problems";
    const list = section.querySelector("[data-problems]");
    const opened = new Set([...list.querySelectorAll("details[open]")].map((d) => d.closest("li").dataset.problem));
    const byId = new Map((state.findings || []).map((f) => [f.id, f]));
    list.innerHTML = state.problems.map((p) => {
      const rows = p.findings.map((id) => byId.get(id)).filter(Boolean);
      const lines = rows.map((f) => `<li class="sev-${CH.esc(f.severity)}"><span class="sev">${CH.esc(f.severity)}</span> ` +
        `<b class="subject">${CH.esc(f.subject)}</b> ${CH.esc(f.text)} <a class="why" href="${CH.esc(findingUrl(state.sweep, f.id))}">why</a></li>`).join("");
      return `<li class="sev-${CH.esc(p.severity)}" data-problem="${CH.esc(p.culprit)}"><details${opened.has(p.culprit) ? " open" : ""}><summary>` +
        `<span class="sev">${CH.esc(p.severity)}</span> ${CH.esc(p.text)} <span class="muted small">(${rows.length} finding${rows.length === 1 ? "" : "s"})</span>` +
        `</summary><ul class="findings-list">${lines}</ul></details></li>`;
    }).join("");
  }

  /* Hovering a finding lights its cells on matrix; a click keeps them lit until the next click. */
  function wireFindings(list, matrix) {
    if (!list) return;
    let pinned = null;
    const cells = (li) => JSON.parse(li.dataset.cells);
    const light = (li) => { const c = li ? cells(li) : { pairs: [], nodes: [] }; matrix.light(c.pairs, c.nodes); };
    list.addEventListener("mouseover", (ev) => {
      if (pinned && !pinned.isConnected) pinned = null; // the list was drawn again
      const li = ev.target.closest("li[data-cells]");
      if (li && !pinned) light(li);
    });
    list.addEventListener("mouseleave", () => { if (!pinned) light(null); });
    list.addEventListener("click", (ev) => {
      if (ev.target.closest("a")) return; // the "why" link goes to the finding's page
      const li = ev.target.closest("li[data-cells]");
      if (!li) return;
      list.querySelectorAll("li.lit").forEach((el) => el.classList.remove("lit"));
      pinned = pinned === li ? null : li;
      if (pinned) pinned.classList.add("lit");
      light(pinned);
    });
  }

  function renderTrending(trending) {
    const section = document.querySelector("[data-trending-section]");
    if (!section || !trending) return;
    section.hidden = !trending.length;
    const gbps = (v) => Number(v).toFixed(3);
    section.querySelector("[data-trending]").innerHTML = trending.map((t) => `<li class="sev-warn"><b class="subject">${CH.esc(t.link)}</b> busbw ${gbps(t.from_busbw_gbps)} → ${gbps(t.to_busbw_gbps)} GB/s over ${CH.esc(t.sweeps)} sweeps</li>`).join("");
  }

  /* The group collectives' table, from the state's groups: it appears as the sweep's group round closes. */
  function renderGroupCollectives(groups) {
    const section = document.querySelector("[data-group-collectives]");
    if (!section || !groups) return;
    section.hidden = !groups.length;
    const num = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(2));
    section.querySelector("tbody").innerHTML = groups.map((g) => {
      const row = `<tr><td>${CH.esc(g.kind)}</td><td>${CH.esc(g.nodes.length)}</td><td>${CH.esc(g.status)}${g.reason ? ` (${CH.esc(g.reason)})` : ""}</td>` +
        `<td>${CH.esc(g.stage || "–")}</td><td class="num">${num(g.busbw_gbps)}</td></tr>`;
      return row + (g.hint ? `<tr><td colspan="5" class="small">${CH.esc(g.hint)}</td></tr>` : "");
    }).join("");
  }

  /* A verdict as a person reads it: an open sweep has none yet, it is "running". */
  function verdictWord(status, verdict) {
    return OPEN.includes(status) ? "running" : verdict;
  }

  /* "ended 2026-11-25 22:51:01 UTC, 7 min ago": the server's format (finished_text, TIME_ZONE) and the pages' one clock. */
  function showEnded(el, state) {
    const at = CH.esc(state.finished), text = CH.esc(state.finished_text);
    el.innerHTML = `ended <time datetime="${at}">${text}</time>, <time datetime="${at}" data-ago title="${text}"></time>`;
    CH.refreshAges(el);
  }

  function renderMeta(meta) {
    const set = (sel, fn) => document.querySelectorAll(sel).forEach(fn);
    if (meta.status) set("[data-sweep-status]", (el) => { el.textContent = meta.status; el.dataset.value = meta.status; });
    if (meta.verdict || meta.status) {
      set("[data-verdict]", (el) => {
        const word = verdictWord(meta.status || el.dataset.status, meta.verdict || el.dataset.value);
        el.textContent = word; el.className = `verdict verdict-${word}`;
        if (meta.status) el.dataset.status = meta.status;
        if (meta.verdict) el.dataset.value = meta.verdict;
      });
    }
    if (meta.progress) {
      set("[data-progress]", (el) => { el.textContent = progressText(meta.progress); });
      set("progress[data-progress-bar]", (el) => { el.max = meta.progress.pairs_total || 1; el.value = meta.progress.pairs_done; });
    }
    if (meta.status && !OPEN.includes(meta.status)) set("[data-open-only]", (el) => { el.hidden = true; });
    // A sweep of "every active node" lists them once it is planned: the page said "0 nodes" until reloaded.
    if (meta.nodes) set("[data-sweep-nodes]", (el) => { el.textContent = `${meta.nodes.length} node${meta.nodes.length === 1 ? "" : "s"}`; });
    // When the sweep ended and how long ago, in the server's format (finished_text) and the pages' one clock.
    if (meta.status) {
      set("[data-sweep-ended]", (el) => {
        el.hidden = OPEN.includes(meta.status) || !meta.finished;
        if (el.hidden) return;
        showEnded(el, meta);
      });
    }
  }

  /* The last complete sweep, beside an open one: its matrix and findings, read once, never live. */
  class LastComplete {
    constructor(root, cfg) {
      this.root = root;
      this.cfg = cfg; // {stateUrl(id), sweepUrl(id), findingUrl(sweep, id), pairUrl(a, b)}
      this.shownId = null;
      if (!root) return;
      this.matrix = new CH.SweepMatrix(root.querySelector("[data-last-heatmaps]"), { pairUrl: cfg.pairUrl });
      wireFindings(root.querySelector("[data-last-findings]"), this.matrix);
    }

    /* Show sweep id (the last complete one before an open sweep), or hide the panel (id null). */
    show(id) {
      if (!this.root) return Promise.resolve();
      this.root.hidden = !id;
      if (!id || id === this.shownId) return Promise.resolve();
      this.shownId = id;
      return fetch(this.cfg.stateUrl(id), { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then((r) => { if (!r.ok) throw new Error(`state: HTTP ${r.status}`); return r.json(); })
        .then((state) => {
          const link = this.root.querySelector("[data-last-link]");
          link.href = this.cfg.sweepUrl(id);
          link.textContent = `#${id}`;
          const verdict = this.root.querySelector("[data-last-verdict]");
          verdict.textContent = state.verdict;
          verdict.className = `verdict verdict-${state.verdict}`;
          // When it ended and how long ago, as the sweep header says it (it read UTC whatever TIME_ZONE was).
          const when = this.root.querySelector("[data-last-when]");
          if (state.finished) showEnded(when, state); else when.textContent = "";
          renderFindings(this.root.querySelector("[data-last-findings]"), state, this.cfg.findingUrl);
          this.matrix.setExpected(state.expected_busbw_gbps);
          this.matrix.setFindings(state.findings);
          if (state.matrix) return this.matrix.load(state.matrix);
          this.matrix.clear();
          return undefined;
        })
        .then(() => { this.root.dataset.loaded = String(id); })
        .catch((err) => { this.shownId = null; console.error(err); });
    }
  }

  CH.initSweepPage = function (cfg) {
    const root = document.getElementById("heatmaps");
    const pairUrl = (a, b) => cfg.pairUrl.replace("/A/", `/${encodeURIComponent(a)}/`).replace("/B/", `/${encodeURIComponent(b)}/`);
    const matrix = new CH.SweepMatrix(root, { pairUrl });
    const sweepUrl = (url, id) => url.replace("/sweeps/0/", `/sweeps/${id}/`);
    const findingUrl = (sweep, id) => cfg.findingUrl.replace("/sweeps/0/findings/0/", `/sweeps/${sweep}/findings/${id}/`);
    const groupsEl = document.getElementById("groups");
    const groups = new CH.GroupPanel(groupsEl, {
      pairUrl, refreshMs: cfg.groupRefreshMs,
      groupsUrl: (id) => sweepUrl(cfg.groupsUrl, id),
      drillUrl: (id, names) => sweepUrl(cfg.matrixUrl, id) + "?" + names.map((g) => `group=${encodeURIComponent(g)}`).join("&"),
    });
    const stateUrl = (id) => cfg.stateUrl.replace("/0/", `/${id}/`);
    const lastComplete = new LastComplete(document.getElementById("last-complete"), {
      stateUrl, findingUrl, pairUrl, sweepUrl: (id) => sweepUrl(cfg.sweepUrl, id),
    });
    const findingsEl = document.querySelector("[data-findings]");
    wireFindings(findingsEl, matrix);
    let lastStatus = null;
    const live = new CH.LiveSweep({
      sweepId: cfg.sweepId, wsPath: cfg.wsPath, followNewest: cfg.followNewest, matrix, groups, stateUrl,
      onState: (state) => {
        lastStatus = state.status;
        const open = OPEN.includes(state.status);
        live.setOpen(open);
        // A fleet without topology groups (every node in one group, or each in its own) has no group matrix to show.
        groupsEl.hidden = !state.grouped;
        renderMeta(state);
        matrix.setExpected(state.expected_busbw_gbps);
        matrix.setFindings(state.findings);
        renderFindings(findingsEl, state, findingUrl);
        renderProblems(document.querySelector("[data-problems-section]"), state, findingUrl);
        renderTrending(state.trending_down);
        renderGroupCollectives(state.group_collectives);
        lastComplete.show(open ? state.last_complete : null);
        document.querySelectorAll("[data-sweep-link]").forEach((a) => { a.href = a.href.replace(/\/sweeps\/\d+\//, `/sweeps/${state.sweep}/`); a.textContent = `#${state.sweep}`; });
      },
      onFrame: (frame) => {
        renderMeta(frame);
        if (frame.status) live.setOpen(OPEN.includes(frame.status));
        // Planned: its nodes and rounds are known now (a sweep of every node listed none while pending).
        if (frame.status === "running" && lastStatus === "pending") live.reload();
        // Findings are written when the sweep closes: re-read once at that moment.
        if (frame.status && OPEN.includes(lastStatus) && !OPEN.includes(frame.status)) {
          // A gpu sweep's GPU table is drawn by the server from its closed checks: read the page again.
          if (document.querySelector("[data-sweep-gpus]")) location.reload();
          else live.reload();
        }
        if (frame.status) lastStatus = frame.status;
      },
    });
    CH.live = live;
    CH.matrix = matrix;
    CH.groups = groups;
    CH.lastComplete = lastComplete;
    live.start();
  };
})();
