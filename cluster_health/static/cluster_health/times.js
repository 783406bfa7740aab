/* Ages on a page ("12 s ago"), re-worded every second from one clock: the server's, as the page was made.
 *
 * Every <time data-ago datetime="..."> is counted against the page's server-now (a <meta>) plus the
 * time elapsed in this browser since, so all ages on a page agree with each other, keep moving, and
 * a browser whose own clock is wrong still shows the right ages. Wording as cluster_health.core.fleet.ago.
 */
"use strict";
(function () {
  const CH = (window.CH = window.CH || {});
  const meta = document.querySelector('meta[name="server-now"]');
  const serverAtLoad = meta ? Date.parse(meta.content) : Date.now();
  const loadedAt = performance.now();

  CH.serverNow = () => serverAtLoad + (performance.now() - loadedAt);

  CH.ago = function (seconds) {
    const s = Math.max(0, seconds);
    if (s < 90) return `${Math.round(s)} s`;
    if (s < 90 * 60) return `${Math.round(s / 60)} min`;
    if (s < 48 * 3600) return `${Math.round(s / 3600)} h`;
    return `${Math.round(s / 86400)} days`;
  };

  CH.refreshAges = function (root) {
    const now = CH.serverNow();
    (root || document).querySelectorAll("time[data-ago]").forEach((el) => {
      const t = Date.parse(el.getAttribute("datetime"));
      if (!Number.isNaN(t)) el.textContent = `${CH.ago((now - t) / 1000)} ago`;
    });
  };

  CH.refreshAges();
  setInterval(() => CH.refreshAges(), 1000);
})();
