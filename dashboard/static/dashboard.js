// mcptape dashboard: live updates over Server-Sent Events. Hand-written, no build step.
// Rows arrive as server-rendered HTML (escaped by the same templates as the page); they are
// parsed into <template> elements, never evaluated, and the CSP forbids inline script anyway.
"use strict";

function followTimeline(table) {
  const body = table.tBodies[0];
  const url = new URL(table.dataset.live, location.href);
  url.searchParams.set("after", table.dataset.after || "0");
  const source = new EventSource(url);
  const note = document.getElementById("live-note");
  source.addEventListener("frames", (ev) => {
    const data = JSON.parse(ev.data);
    const tpl = document.createElement("template");
    tpl.innerHTML = data.html;
    const nearBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    for (const row of Array.from(tpl.content.querySelectorAll("tr"))) {
      if (document.getElementById(row.id)) continue;
      row.classList.add("fresh");
      body.appendChild(row);
    }
    const last = data.rows[data.rows.length - 1];
    if (last) table.dataset.after = String(last.seq);
    const count = document.getElementById("frame-count");
    if (count && last) count.textContent = String(Math.max(Number(count.textContent) || 0, last.seq));
    if (nearBottom) window.scrollTo(0, document.body.scrollHeight);
  });
  source.addEventListener("status", (ev) => {
    const data = JSON.parse(ev.data);
    source.close();
    const badge = document.querySelector("#session-status .badge");
    if (badge) {
      badge.textContent = data.status;
      badge.className = "badge st-" + data.status;
    }
    if (note) note.textContent = "Session " + data.status + ".";
    if (data.frame_count !== null && data.frame_count !== undefined) {
      const count = document.getElementById("frame-count");
      if (count) count.textContent = String(data.frame_count);
    }
  });
}

function followSessions(table) {
  const source = new EventSource(table.dataset.live);
  source.addEventListener("sessions", (ev) => {
    const data = JSON.parse(ev.data);
    for (const u of data.updates) {
      const row = table.querySelector('tr[data-id="' + CSS.escape(u.id) + '"]');
      if (!row) continue;
      row.querySelector(".frames").textContent = String(u.frame_count);
      row.querySelector(".exchanges").textContent = String(u.exchanges);
      row.querySelector(".dur").textContent = u.duration;
      const cell = row.querySelector("td.findings");
      if (cell && u.findings) {
        cell.replaceChildren();
        for (const sev of ["error", "warning", "info"]) {
          if (!u.findings[sev]) continue;
          const b = document.createElement("span");
          b.className = "badge sev-" + sev;
          b.textContent = u.findings[sev] + " " + sev;
          cell.append(b, " ");
        }
      }
      const badge = row.querySelector(".status .badge");
      if (badge) {
        badge.textContent = u.status;
        badge.className = "badge st-" + u.status;
      }
    }
    const banner = document.getElementById("newer");
    if (banner && data.newer > 0) {
      banner.hidden = false;
      banner.querySelector("a").textContent =
        data.newer + " new session" + (data.newer === 1 ? "" : "s") + " — show";
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const timeline = document.querySelector("table.timeline[data-live]");
  if (timeline) followTimeline(timeline);
  const sessions = document.querySelector("table.sessions[data-live]");
  if (sessions) followSessions(sessions);
});
