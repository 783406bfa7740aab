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

  // Ages come worded by the server, against its clock, and times.js keeps them moving against that same
  // clock (data-ago), so a browser's wrong clock shows no wrong age and every age on the page agrees.
  function rowHtml(n, nodeUrl) {
    const beat = n.last_heartbeat ? `<time datetime="${esc(n.last_heartbeat)}" data-ago title="${esc(n.last_heartbeat_text)}">${esc(n.heard)}</time>` : "never";
    return `<tr data-node="${esc(n.name)}" class="${n.online ? "online" : "offline"}${n.stale ? " stale" : ""}">` +
      `<td><a href="${esc(nodeUrl.replace("/NODE/", `/${encodeURIComponent(n.name)}/`))}">${esc(n.name)}</a></td>` +
      `<td class="mono">${esc(n.address)}</td>` +
      `<td><span class="dot ${n.online ? "dot-online" : "dot-offline"}"></span>${esc(n.state)}</td>` +
      `<td>${beat}</td><td class="mono small">${esc(n.agent_version)}</td></tr>`;
  }

  function retiredHtml(n, nodeUrl) {
    return `<tr data-retired-node="${esc(n.name)}" class="retired">` +
      `<td><a href="${esc(nodeUrl.replace("/NODE/", `/${encodeURIComponent(n.name)}/`))}">${esc(n.name)}</a></td>` +
      `<td class="mono">${esc(n.address)}</td><td><time datetime="${esc(n.retired_at)}">${esc(n.retired_at_text)}</time></td>` +
      `<td>${esc(n.heard)}</td></tr>`;
  }

  CH.followNodes = function (cfg) {
    const table = document.getElementById("nodes-table");
    const retired = document.getElementById("retired-nodes");
    const set = (sel, fn) => document.querySelectorAll(sel).forEach(fn);

    function render(state) {
      const gone = state.retired || [];
      table.tBodies[0].innerHTML = state.nodes.map((n) => rowHtml(n, cfg.nodeUrl)).join("");
      table.hidden = !state.nodes.length;
      if (retired) {
        retired.querySelector("tbody").innerHTML = gone.map((n) => retiredHtml(n, cfg.nodeUrl)).join("");
        retired.hidden = !gone.length;
      }
      set("[data-no-nodes]", (el) => { el.hidden = state.total + state.retired_total > 0; });
      set("[data-online-count]", (el) => { el.textContent = `${state.online} of ${state.total} online`; });
      set("[data-retired-count]", (el) => { el.textContent = `${state.retired_total} retired (left out of sweeps)`; });
      // A large fleet lists its first rows only (offline first); the rest are counted.
      set("[data-nodes-more]", (el) => {
        el.hidden = state.total <= state.nodes.length;
        el.firstChild.textContent = `${state.nodes.length} of ${state.total} listed, offline first; every node is on the `;
      });
      if (CH.refreshAges) CH.refreshAges(table);
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
