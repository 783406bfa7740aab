/* The overview's node table, kept current without a reload.
 *
 * Polled from nodes.json rather than pushed: a node goes offline by falling silent,
 * which sends no event, and every node's heartbeat every few seconds is too chatty
 * to broadcast. One request at a time; none while the tab is hidden.
 */
"use strict";

(function () {
  const CH = (window.CH = window.CH || {});

  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  }

  CH.ago = function (seconds) {
    const s = Math.max(0, seconds);
    if (s < 90) return `${Math.round(s)} s ago`;
    if (s < 90 * 60) return `${Math.round(s / 60)} min ago`;
    if (s < 48 * 3600) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} days ago`;
  };

  function rowHtml(n, now, nodeUrl) {
    const state = n.online ? `online${n.busy ? ", probing" : ""}` : "offline";
    // Ages are taken against the server's clock, so a browser's wrong clock shows no wrong age.
    const beat = n.last_heartbeat
      ? `<time datetime="${esc(n.last_heartbeat)}" title="${esc(n.last_heartbeat)}">${CH.ago((now - Date.parse(n.last_heartbeat)) / 1000)}</time>`
      : "never";
    return `<tr data-node="${esc(n.name)}" class="${n.online ? "online" : "offline"}">` +
      `<td><a href="${esc(nodeUrl.replace("/NODE/", `/${encodeURIComponent(n.name)}/`))}">${esc(n.name)}</a></td>` +
      `<td class="mono">${esc(n.address)}</td>` +
      `<td><span class="dot ${n.online ? "dot-online" : "dot-offline"}"></span>${state}</td>` +
      `<td>${beat}</td><td class="mono small">${esc(n.agent_version)}</td></tr>`;
  }

  CH.followNodes = function (cfg) {
    const table = document.getElementById("nodes-table");
    const set = (sel, fn) => document.querySelectorAll(sel).forEach(fn);

    function render(state) {
      const now = Date.parse(state.now);
      table.tBodies[0].innerHTML = state.nodes.map((n) => rowHtml(n, now, cfg.nodeUrl)).join("");
      table.hidden = !state.nodes.length;
      set("[data-no-nodes]", (el) => { el.hidden = state.nodes.length > 0; });
      set("[data-online-count]", (el) => { el.textContent = `${state.online} of ${state.nodes.length} online`; });
      CH.nodesPolledAt = Date.now();
    }

    function poll() {
      if (document.hidden) { setTimeout(poll, cfg.intervalMs); return; }
      fetch(cfg.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then((r) => { if (!r.ok) throw new Error(`nodes: HTTP ${r.status}`); return r.json(); })
        .then((state) => { render(state); set("[data-nodes-stale]", (el) => { el.hidden = true; }); })
        .catch(() => set("[data-nodes-stale]", (el) => { el.hidden = false; }))
        .finally(() => setTimeout(poll, cfg.intervalMs));
    }

    setTimeout(poll, cfg.intervalMs);
  };
})();
