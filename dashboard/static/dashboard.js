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

// ---------------------------------------------------------------------------------- inspector
// Master–detail, the keyboard and copy: progressive. Every link still leads to a full page;
// with JavaScript an exchange opens beside the list (?x=SEQ in the address, shareable).

function masterTable() {
  return document.querySelector("table.timeline#timeline, table.waterfall, table.sessions");
}

function detailPane(create) {
  let pane = document.getElementById("detail");
  if (!pane && create) {
    const wrap = document.getElementById("split");
    if (!wrap) return null;
    pane = document.createElement("aside");
    pane.id = "detail";
    pane.className = "detail-pane";
    wrap.appendChild(pane);
  }
  if (pane) document.getElementById("split").classList.add("has-detail");
  return pane;
}

function seqOf(href) {
  const m = /\/exchanges\/(\d+)$/.exec(new URL(href, location.href).pathname);
  return m ? m[1] : null;
}

function openDetail(href, push) {
  const pane = detailPane(true);
  if (!pane) return false;
  const seq = seqOf(href);
  pane.dataset.src = href;
  pane.setAttribute("aria-busy", "true");
  fetch(href, { credentials: "same-origin", headers: { Accept: "text/html" } })
    .then((r) => r.text())
    .then((html) => {
      if (pane.dataset.src !== href) return; // a later selection won
      const doc = new DOMParser().parseFromString(html, "text/html");
      const main = doc.querySelector("main");
      const bar = document.createElement("div");
      bar.className = "detail-bar";
      const full = document.createElement("a");
      full.href = href;
      full.className = "full-page";
      full.textContent = "open as a page ↗";
      const close = document.createElement("button");
      close.type = "button";
      close.className = "close-detail";
      close.textContent = "✕ close (Esc)";
      close.addEventListener("click", () => closeDetail(true));
      bar.append(full, close);
      pane.replaceChildren(bar, ...(main ? Array.from(main.childNodes) : []));
      pane.removeAttribute("aria-busy");
      wireCopies(pane);
    });
  for (const row of document.querySelectorAll("tr.open")) row.classList.remove("open");
  const row = seq && (document.getElementById("f" + seq) || document.getElementById("w" + seq));
  if (row) row.classList.add("open");
  if (push && seq) {
    const url = new URL(location.href);
    url.searchParams.set("x", seq);
    history.pushState({ x: seq }, "", url);
  }
  return true;
}

function closeDetail(push) {
  const pane = document.getElementById("detail");
  if (!pane) return false;
  pane.remove();
  document.getElementById("split").classList.remove("has-detail");
  for (const row of document.querySelectorAll("tr.open")) row.classList.remove("open");
  if (push) {
    const url = new URL(location.href);
    url.searchParams.delete("x");
    history.pushState({}, "", url);
  }
  return true;
}

function exchangeHref(row) {
  const a = row.querySelector("a.exchange-link");
  return a ? a.href : null;
}

function wireSplit() {
  const split = document.getElementById("split");
  if (!split) return;
  const table = split.querySelector("table");
  table.addEventListener("click", (ev) => {
    if (ev.button !== 0 || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.altKey) return;
    const link = ev.target.closest("a");
    const row = ev.target.closest("tr.row");
    if (!row) return;
    if (link && !link.classList.contains("exchange-link")) return; // other links: a full page
    const href = exchangeHref(row);
    if (!href) return;
    ev.preventDefault();
    select(row);
    openDetail(href, true);
  });
  const pane = document.getElementById("detail");
  if (pane && pane.dataset.src) openDetail(pane.dataset.src, false);
  window.addEventListener("popstate", () => {
    const x = new URL(location.href).searchParams.get("x");
    const sid = split.dataset.session;
    if (x && sid) openDetail("/sessions/" + sid + "/exchanges/" + x, false);
    else closeDetail(false);
  });
}

// The keyboard: / search, j/k rows, Enter open, Esc close, ? the keys.
function rows() {
  const t = masterTable();
  return t ? Array.from(t.querySelectorAll("tbody tr.row, tbody tr[data-id]")) : [];
}

function select(row) {
  for (const r of document.querySelectorAll("tr.selected")) r.classList.remove("selected");
  row.classList.add("selected");
  row.scrollIntoView({ block: "nearest" });
}

function move(step) {
  const all = rows();
  if (!all.length) return;
  const at = all.findIndex((r) => r.classList.contains("selected"));
  const next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(Math.max(at + step, 0), all.length - 1);
  select(all[next]);
}

function openSelected() {
  const row = document.querySelector("tr.selected");
  if (!row) return;
  const href = exchangeHref(row);
  if (href && document.getElementById("split")) {
    openDetail(href, true);
    return;
  }
  const link = row.querySelector("a.session-link, a.exchange-link, a");
  if (link) location.href = link.href;
}

function typing(el) {
  return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
}

function onKey(ev) {
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const keys = document.getElementById("keys");
  if (typing(ev.target)) {
    if (ev.key === "Escape") ev.target.blur();
    return;
  }
  if (keys && keys.open) return; // the dialog closes itself on Esc
  switch (ev.key) {
    case "/": {
      const box = document.querySelector("input[type=search], form.filters input:not([type=hidden]), form.filters select");
      if (box) {
        ev.preventDefault();
        box.focus();
      }
      break;
    }
    case "j":
      move(1);
      break;
    case "k":
      move(-1);
      break;
    case "Enter":
      if (document.querySelector("tr.selected") && !ev.target.closest("a, button")) {
        ev.preventDefault();
        openSelected();
      }
      break;
    case "Escape":
      closeDetail(true);
      break;
    case "?":
      if (keys) keys.showModal();
      break;
  }
}

// Copy: the exact text is in a <template> beside the button.
function wireCopies(root) {
  for (const button of root.querySelectorAll("button.copy[data-copy]")) {
    if (button.dataset.wired) continue;
    button.dataset.wired = "1";
    button.hidden = false;
    button.addEventListener("click", () => {
      const tpl = root.querySelector("template#" + CSS.escape(button.dataset.copy));
      if (!tpl) return;
      const label = button.textContent;
      navigator.clipboard.writeText(tpl.content.textContent).then(
        () => { button.textContent = "Copied"; },
        () => { button.textContent = "Copy failed"; },
      );
      setTimeout(() => { button.textContent = label; }, 1500);
    });
  }
}

// Intercepted: follow the held messages (the page's .json twin, every second). The page
// reloads when the set of held messages changes — unless a message is being edited.
function followIntercepts(box) {
  let editing = false;
  box.addEventListener("input", () => { editing = true; });
  const tick = () => {
    fetch(box.dataset.live, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((r) => (r.ok ? r.json() : null))
      .then((data) => {
        if (!data) return;
        const ids = data.held.map((h) => String(h.id)).join(",");
        const count = document.getElementById("held-count");
        if (count) count.textContent = String(data.count);
        if (ids !== box.dataset.ids && !editing) location.reload();
      })
      .catch(() => {})
      .finally(() => setTimeout(tick, 1000));
  };
  setTimeout(tick, 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  const held = document.getElementById("intercepts");
  if (held) followIntercepts(held);
  wireSplit();
  wireCopies(document);
  document.addEventListener("keydown", onKey);
  const close = document.querySelector("#keys button.close-keys");
  if (close) close.addEventListener("click", () => document.getElementById("keys").close());
});
