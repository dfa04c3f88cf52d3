// The dashboard page: the jobs table kept live from /events, a job's detail, queue, hosts,
// report. No framework, no build step.
"use strict";
const CSRF = document.querySelector('meta[name="csrf"]').content;
const READ_ONLY = document.querySelector('meta[name="read-only"]').content === "true";
const OPEN = new Set(["queued", "pending", "running"]);
const rows = new Map(); // job id -> row from the server
const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children) node.append(child);
  return node;
}

function human(seconds) {
  if (seconds == null) return "-";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${String(Math.floor(s / 60) % 60).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d ${String(Math.floor(s / 3600) % 24).padStart(2, "0")}h`;
}

const since = (row) => Date.now() / 1000 - (row.as_of || Date.now() / 1000);
const age = (row) => row.age_s + since(row);
const duration = (row) =>
  row.duration_s == null ? null : row.duration_s + (OPEN.has(row.state) ? since(row) : 0);
const cost = (row) => (row.cost_usd == null ? "-" : `$${row.cost_usd.toFixed(2)}`);
// A running agent's memory now, an ended one's peak (as delegate/runtime/top/rows.py says it).
function memory(row) {
  let size = num(row.memory_bytes);
  if (size == null) return "-";
  for (const unit of ["K", "M", "G", "T"]) {
    size /= 1024;
    if (size < 1000 || unit === "T") return size < 10 ? `${size.toFixed(1)}${unit}` : `${Math.round(size)}${unit}`;
  }
}

// What a row says beside its state, as delegate/core/outcome.py says it (keep the two alike):
// a completion's denied tool calls, the agent CLI's own API retry (its countdown runs here),
// a queued attempt's resume time (in the reader's time zone).
const TERMINAL = new Set(["completed", "error", "cancelled", "failed"]);
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const pad = (n) => String(n).padStart(2, "0");
const num = (v) => (typeof v === "number" && Number.isFinite(v) && Math.abs(v) < 1e15 ? v : null);
const count = (v) => (num(v) == null ? null : String(Math.trunc(v)));
const ordinal = (v) => (count(v) === "0" ? null : count(v)); // 0: the CLI did not say
const when = (text) => {
  const t = typeof text === "string" && text ? Date.parse(text) : NaN;
  return Number.isNaN(t) ? null : t;
};

function deniedCount(tools) {
  const n = Array.isArray(tools) ? tools.length : 0;
  return n === 0 ? "" : `${n} tool call${n === 1 ? "" : "s"} denied`;
}

function stateWords(row) {
  const denied = deniedCount(row.denied_tools);
  return row.state === "completed" && denied ? `completed, ${denied}` : row.state;
}

function retryWords(retry) {
  const status = count(retry.error_status), error = retry.error;
  let kind = "API error";
  if (error === "reconnecting") kind = "reconnecting";
  else if (status === "429" || error === "rate_limit") kind = "rate limited";
  else if (status != null) kind = `API error ${status}`;
  else if (typeof error === "string" && error) kind = `API error (${error})`;
  const attempt = ordinal(retry.attempt), most = ordinal(retry.max_retries);
  const which = attempt == null ? "retry" : `retry ${attempt}` + (most ? `/${most}` : "");
  const delay = num(retry.retry_delay_ms), seen = when(retry.at);
  const left = delay == null || seen == null ? null : Math.max(0, (seen + delay - Date.now()) / 1000);
  return `${kind}, ${which}${left == null ? "" : ` in ${human(left)}`}`;
}

function minute(ms) {
  const at = new Date(ms), today = new Date();
  const clock = `${pad(at.getHours())}:${pad(at.getMinutes())}`;
  if (at.toDateString() === today.toDateString()) return clock;
  if (at.getFullYear() === today.getFullYear()) return `${MONTHS[at.getMonth()]} ${pad(at.getDate())} ${clock}`;
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ${clock}`;
}

const lastEvent = (row) => row.last_event + (row.last_detail ? ` · ${row.last_detail}` : "");
const eventText = (row) => note(row) || lastEvent(row) || "-";

function note(row) {
  const resumes = when(row.not_before);
  if (row.state === "queued" && resumes != null && resumes > Date.now()) return `waiting, resumes ${minute(resumes)}`;
  const retry = row.agent_retry;
  if (!TERMINAL.has(row.state) && retry && typeof retry === "object" && !Array.isArray(retry)) return retryWords(retry);
  return "";
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json", "x-delegate-csrf": CSRF },
    body: JSON.stringify(body || {}),
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) alert(answer.error || `refused (${response.status})`);
  return answer;
}

// Rows are cloned from one prototype and their clicks handled once on the table (no closure
// per row): a thousand rows are built in a few milliseconds.
const ROW = el("tr", {}, ...["id", "state", "agent", "num age", "num duration", "event", "num cost",
  "num memory wide", "actions"].map((cls) => el("td", { class: cls })));

function actions(cell, row) {
  if (READ_ONLY) return;
  if (row.state === "running" && row.session !== "-") {
    cell.append(el("button", { type: "button", "data-action": "send" }, "Send"), " ");
  }
  if (OPEN.has(row.state)) {
    cell.append(el("button", { type: "button", class: "danger", "data-action": "cancel" }, "Cancel"));
  }
}

function rowNode(row) {
  const tr = ROW.cloneNode(true);
  tr.dataset.job = row.job_id;
  tr.dataset.state = row.state;
  const [id, state, agent, rowAge, rowDuration, last, rowCost, rowMemory, acts] = tr.children;
  id.textContent = row.job_id;
  const said = stateWords(row);
  state.className = `state state-${said === row.state ? row.state : "denied"}`;
  state.textContent = said;
  agent.textContent = row.agent;
  rowAge.textContent = human(age(row));
  rowDuration.textContent = human(duration(row));
  last.textContent = eventText(row);
  rowCost.textContent = cost(row);
  rowMemory.textContent = memory(row);
  actions(acts, row);
  return tr;
}

function clicked(e) {
  const tr = e.target.closest("tr[data-job]");
  const row = tr && rows.get(tr.dataset.job);
  if (!row) return;
  const action = e.target.closest("button[data-action]");
  if (!action) return showDetail(row.job_id);
  if (action.dataset.action === "send") {
    const text = prompt(`Type into ${row.session}:`);
    if (text) post(`/api/jobs/${row.job_id}/send`, { text });
  } else if (action.dataset.action === "cancel") {
    if (confirm(`Cancel job ${row.job_id}?`)) post(`/api/jobs/${row.job_id}/cancel`);
  }
}

function order(a, b) {
  const oa = OPEN.has(a.state), ob = OPEN.has(b.state);
  if (oa !== ob) return oa ? -1 : 1;
  const ca = a.as_of - a.age_s, cb = b.as_of - b.age_s; // when each was registered
  return cb - ca || (a.job_id < b.job_id ? -1 : 1);
}

function matches(row) {
  const words = $("#filter").value.trim().toLowerCase();
  if (!words) return true;
  const text = `${row.job_id} ${stateWords(row)} ${row.agent} ${row.last_event} ${row.last_detail} ${note(row)}`;
  return words.split(/\s+/).every((w) => text.toLowerCase().includes(w));
}

function renderAll() {
  const body = $("#jobs tbody");
  const shown = [...rows.values()].filter(matches).sort(order);
  const fragment = document.createDocumentFragment();
  for (const row of shown) fragment.append(rowNode(row));
  body.replaceChildren(fragment);
  $("#empty").hidden = shown.length > 0;
  $("#count-jobs").textContent = `(${rows.size})`;
  renderQueue();
}

function renderQueue() {
  const queued = [...rows.values()].filter((r) => r.queue_position != null)
    .sort((a, b) => a.queue_position - b.queue_position);
  $("#queue tbody").replaceChildren(...queued.map((r) => {
    const tr = el("tr", { "data-job": r.job_id }, el("td", { class: "num" }, String(r.queue_position)),
      el("td", { class: "id" }, r.job_id), el("td", {}, r.agent),
      el("td", { class: "num" }, human(duration(r))));
    tr.onclick = () => showDetail(r.job_id);
    return tr;
  }));
  $("#queue-empty").hidden = queued.length > 0;
  $("#count-queue").textContent = queued.length ? `(${queued.length})` : "";
}

function applyChange(change) {
  if (change.full) rows.clear();
  let reorder = change.full;
  for (const row of change.rows) {
    const old = rows.get(row.job_id);
    if (!old || OPEN.has(old.state) !== OPEN.has(row.state)) reorder = true;
    rows.set(row.job_id, row);
    if (!reorder) {
      const tr = document.querySelector(`#jobs tr[data-job="${row.job_id}"]`);
      if (tr) tr.replaceWith(rowNode(row));
      else if (matches(row)) reorder = true;
    }
  }
  for (const id of change.removed || []) { rows.delete(id); reorder = true; }
  const note = $("#note");
  note.hidden = !change.note;
  note.textContent = change.note || "";
  if (reorder) renderAll(); else renderQueue();
  window.dispatchEvent(new CustomEvent("dashboard-table", { detail: change.version }));
}

function connect(shown) {
  // the page came with the table at version `shown`: only what changed since is sent
  const source = new EventSource(shown == null ? "/events" : `/events?after=${shown}`);
  source.addEventListener("table", (e) => applyChange(JSON.parse(e.data)));
  source.onopen = () => { $("#live").textContent = "live"; $("#live").classList.remove("off"); };
  source.onerror = () => { $("#live").textContent = "reconnecting"; $("#live").classList.add("off"); };
}

// The detail's actions: Approve / Deny each waiting permission request, Retry an ended job
// that has no later attempt yet. What became of one is said above the fields.
function said(text, bad) {
  const p = $("#detail-said");
  p.textContent = text;
  p.classList.toggle("bad", Boolean(bad));
  p.hidden = !text;
}

async function act(jobId, action, body, done) {
  const response = await fetch(`/api/jobs/${jobId}/${action}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-delegate-csrf": CSRF },
    body: JSON.stringify(body || {}),
  });
  const answer = await response.json().catch(() => ({}));
  await showDetail(jobId);
  said(response.ok ? done(answer) : (answer.error || `refused (${response.status})`), !response.ok);
}

function decide(jobId, request, deny) {
  let reason = null;
  if (deny) {
    reason = prompt(`Deny ${request.tool} ${request.summary}? Why (optional; the agent is told):`);
    if (reason === null) return;
  }
  const action = deny ? "deny" : "approve";
  act(jobId, action, { request_id: request.request_id, reason },
    (a) => `${deny ? "denied" : "allowed"}: ${a.tool} ${a.summary}`);
}

function detailActions(detail) {
  const job = detail.job;
  const box = $("#detail-actions");
  box.replaceChildren();
  $("#requests").replaceChildren(...detail.waiting.map((r) => {
    // the whole call, wrapped (never the cut summary): what Approve lets run
    const li = el("li", { "data-request": r.request_id }, el("span", { class: "asks" },
      `${r.tool}: ${r.call || r.summary}`));
    if (!READ_ONLY) {
      const yes = el("button", { type: "button", "data-action": "approve" }, "Approve");
      const no = el("button", { type: "button", class: "danger", "data-action": "deny" }, "Deny");
      yes.onclick = () => decide(job.job_id, r, false);
      no.onclick = () => decide(job.job_id, r, true);
      li.append(yes, no);
    }
    return li;
  }));
  $("#permission").hidden = detail.waiting.length === 0;
  if (!READ_ONLY && !OPEN.has(job.state) && !job.retried_by) {
    const again = el("button", { type: "button", "data-action": "retry" }, "Retry");
    again.onclick = () => act(job.job_id, "retry", {},
      (a) => `attempt ${a.attempt} started as job ${a.job_id}`);
    box.append(again);
  }
}

function showDiff(diff) {
  $("#diff").hidden = !diff;
  if (!diff) return;
  $("#diff-stat").textContent = diff.stat;
  $("#diff-stat").hidden = !diff.stat;
  const cut = diff.truncated ? "\n… (cut here: `delegate diff` shows all of it)" : "";
  $("#diff-patch").textContent = diff.patch + cut;
  $("#diff-patch").hidden = !diff.patch;
  $("#diff-note").textContent = diff.note || "";
  $("#diff-note").hidden = !diff.note;
}

async function showDetail(jobId) {
  const response = await fetch(`/api/jobs/${jobId}`);
  if (!response.ok) return;
  const detail = await response.json();
  if ($("#detail").dataset.job !== jobId) said("");
  $("#detail").dataset.job = jobId;
  $("#detail-title").textContent = `job ${jobId}`;
  detailActions(detail);
  showDiff(detail.diff);
  const fields = Object.entries(detail.job).filter(([, v]) => v != null && v !== "");
  $("#detail-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
  $("#timeline").replaceChildren(...detail.timeline.map((e) => el("li", {},
    `${(e.ts || "").replace("T", " ").slice(0, 19)}  ${e.kind}${e.event ? " " + e.event : ""}` +
    `${e.seq != null ? " #" + e.seq : ""}${e.detail ? " · " + e.detail : ""}`)));
  $("#pane").textContent = detail.pane.length ? detail.pane.join("\n") : (detail.pane_note || "(no pane)");
  $("#logs").textContent = detail.logs.join("\n");
  $("#detail").hidden = false;
}

async function loadHosts() {
  const answer = await (await fetch("/api/hosts")).json();
  $("#hosts tbody").replaceChildren(...answer.hosts.map((h) => el("tr", {},
    el("td", {}, h.name), el("td", { class: h.online ? "state-completed" : "state-failed" }, h.online ? "online" : "offline"),
    el("td", {}, h.last_seen || "never"), el("td", { class: "num" }, String(h.running_jobs)))));
  const note = $("#hosts-note");
  note.hidden = answer.hosts.length > 0 && !answer.note;
  note.textContent = answer.note || "no agent hosts (add one with `delegate host add NAME`)";
}

async function loadReport() {
  const info = await (await fetch("/api/report")).json();
  const p = $("#report-info");
  if (!info.available) {
    p.textContent = `No report in ${info.folder} yet: run delegate report --format html --out ${info.folder}`;
  } else {
    p.replaceChildren("Latest report: ", el("a", { href: "/report", target: "_blank" }, info.name),
      ` (written ${info.written_at})`);
  }
}

function showTab() {
  const tab = (location.hash || "#jobs").slice(1);
  for (const name of ["jobs", "queue", "hosts", "report"]) {
    $(`#tab-${name}`).hidden = name !== tab;
    document.querySelector(`nav a[data-tab="${name}"]`).classList.toggle("active", name === tab);
  }
  if (tab === "hosts") loadHosts();
  if (tab === "report") loadReport();
}

function tick() {
  for (const tr of document.querySelectorAll("#jobs tbody tr")) {
    const row = rows.get(tr.dataset.job);
    if (!row || !OPEN.has(row.state)) continue;
    tr.querySelector(".age").textContent = human(age(row));
    tr.querySelector(".duration").textContent = human(duration(row));
    // an API retry's countdown runs; a resume time passes
    if (row.agent_retry || row.not_before) tr.querySelector(".event").textContent = eventText(row);
  }
}

$("#filter").addEventListener("input", renderAll);
$("#jobs tbody").addEventListener("click", clicked);
$("#detail-close").onclick = () => { $("#detail").hidden = true; };
window.addEventListener("hashchange", showTab);
showTab();
const first = document.getElementById("first-table");
const table = first && first.textContent.trim() ? JSON.parse(first.textContent) : null;
if (table) applyChange(table);
connect(table ? table.version : null);
setInterval(tick, 1000);
