// The Capstan web chat: plain JavaScript, no build step. It speaks the HTTP
// API (POST /v1/runs answers with the run's SSE stream) and renders the event
// protocol of docs/EVENTS.md: the answer from response.*, the activity feed
// from `activity`, the plan panel from plan.* and terminal.step, approvals
// from approval.*. Answers are Markdown rendered by markdown.js (sanitised);
// every other server string (file text, commands, feed lines, titles) goes
// through textContent, never HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
};

// The page was opened with the start-up URL (`/?token=...`); the server
// answered it with an HttpOnly SameSite=Strict cookie that carries the token
// from now on. The script never sees the token: it only drops it from the
// address bar (and so from history and bookmarks).
if (new URLSearchParams(location.search).has("token")) {
  history.replaceState(null, "", location.pathname + location.hash);
}

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    ...options,
    headers,
    credentials: "same-origin",
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  if (!resp.ok) {
    let message = `${resp.status} ${resp.statusText}`;
    try {
      message = (await resp.json()).error.message;
    } catch (_) { /* not a JSON error */ }
    throw new Error(message);
  }
  return resp;
}

const state = {
  sessionId: null,
  runId: null,
  workspaces: [],
  sessions: [],
};

function setStatus(text) {
  $("#status").textContent = text;
}

// Theme: system, then dark, then light (theme.js applied the saved choice).

const THEMES = ["system", "dark", "light"];
function showTheme() {
  const t = document.documentElement.dataset.theme || "system";
  const words = { system: "follows the system", dark: "dark", light: "light" };
  $("#theme-toggle").setAttribute("aria-label", `Theme: ${words[t]} (change)`);
  $("#theme-toggle").title = `Theme: ${words[t]}`;
}
$("#theme-toggle").addEventListener("click", () => {
  const now = document.documentElement.dataset.theme || "system";
  const next = THEMES[(THEMES.indexOf(now) + 1) % THEMES.length];
  if (next === "system") {
    delete document.documentElement.dataset.theme;
    localStorage.removeItem("capstan-theme");
  } else {
    document.documentElement.dataset.theme = next;
    localStorage.setItem("capstan-theme", next);
  }
  showTheme();
});
showTheme();

// The sessions drawer (narrow screens).

function setDrawer(open) {
  document.body.classList.toggle("drawer-open", open);
  $("#drawer-open").setAttribute("aria-expanded", String(open));
  $("#scrim").hidden = !open;
  if (open) $("#session-search").focus();
}
$("#drawer-open").addEventListener("click", () => setDrawer(true));
$("#drawer-close").addEventListener("click", () => { setDrawer(false); $("#drawer-open").focus(); });
$("#scrim").addEventListener("click", () => setDrawer(false));

// Workspaces.

function workspaceById(id) {
  return state.workspaces.find((w) => w.id === id);
}

function selectedWorkspace() {
  return state.workspaces.find((w) => w.root_path === $("#workspace").value);
}

async function loadWorkspaces(select) {
  const { workspaces, default: fallback } = await (await api("/v1/workspaces")).json();
  state.workspaces = workspaces;
  const picker = $("#workspace");
  picker.replaceChildren(el("option", { value: "", text: "No workspace" }));
  for (const ws of workspaces) {
    picker.append(el("option", { value: ws.root_path, text: ws.name || ws.root_path, title: ws.root_path }));
  }
  // The explicit choice, else the last one used here, else the server's `-w`.
  const saved = localStorage.getItem("capstan-workspace");
  const has = (v) => v !== null && v !== undefined && [...picker.options].some((o) => o.value === v);
  picker.value = [select, saved, fallback].find(has) ?? "";
  showProfile();
}

function showProfile() {
  const ws = selectedWorkspace();
  $("#profile").textContent = ws ? `policy: ${ws.policy_profile}` : "";
  $("#workspace").title = ws ? ws.root_path : "No workspace: answers without files or commands";
  localStorage.setItem("capstan-workspace", $("#workspace").value);
}

$("#workspace").addEventListener("change", () => { showProfile(); renderSessions(); });

$("#add-workspace").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const path = $("#workspace-path").value.trim();
  if (!path) return;
  try {
    // Selects a folder registered on this machine; the server refuses to
    // register new ones from a web page and says how (`capstan workspace add`).
    const ws = await (await api("/v1/workspaces", { method: "POST", body: { path } })).json();
    $("#workspace-path").value = "";
    await loadWorkspaces(ws.root_path);
    setStatus(`workspace ${ws.name} selected`);
  } catch (e) {
    setStatus(`could not use the workspace: ${e.message}`);
  }
});

// Sessions: grouped by workspace, newest first, with dates, search, rename, delete.

const dayFormat = new Intl.DateTimeFormat(undefined, { day: "numeric", month: "short" });
const yearFormat = new Intl.DateTimeFormat(undefined, { day: "numeric", month: "short", year: "numeric" });
const timeFormat = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });

function when(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const now = new Date();
  if (d.toDateString() === now.toDateString()) return timeFormat.format(d);
  return (d.getFullYear() === now.getFullYear() ? dayFormat : yearFormat).format(d);
}

let searchTimer = null;
$("#session-search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => loadSessions().catch((e) => setStatus(e.message)), 200);
});

async function loadSessions() {
  const q = $("#session-search").value.trim();
  const query = q ? `&q=${encodeURIComponent(q)}` : "";
  const { sessions } = await (await api(`/v1/sessions?limit=100${query}`)).json();
  state.sessions = sessions;
  renderSessions();
}

function renderSessions() {
  const groups = new Map();
  for (const s of state.sessions) {
    const key = s.workspace_id || "";
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(s);
  }
  // The selected workspace's sessions first, then the others by recency.
  const current = selectedWorkspace()?.id || "";
  const keys = [...groups.keys()].sort((a, b) => (b === current) - (a === current));
  const box = $("#sessions");
  box.replaceChildren();
  if (!state.sessions.length) {
    box.append(el("p", { class: "muted", text: $("#session-search").value ? "No session matches." : "No sessions yet." }));
  }
  for (const key of keys) {
    const ws = workspaceById(key);
    const name = key ? (ws ? ws.name : "Removed workspace") : "No workspace";
    const headingId = `group-${key || "none"}`;
    const list = el("ul", { "aria-labelledby": headingId });
    for (const s of groups.get(key)) list.append(sessionItem(s));
    box.append(el("section", { class: "session-group" },
      el("h3", { id: headingId, text: name, title: ws ? ws.root_path : "" }), list));
  }
}

function sessionItem(s) {
  const title = s.title || "Untitled session";
  const open = el("button", { type: "button", class: "session-open", title },
    el("span", { class: "session-title", text: title }),
    el("time", { class: "session-date", datetime: s.updated_at, text: when(s.updated_at) }));
  if (s.id === state.sessionId) open.setAttribute("aria-current", "true");
  open.addEventListener("click", () => { openSession(s.id); setDrawer(false); });
  const rename = el("button", { type: "button", class: "icon-button small", "aria-label": `Rename “${title}”`, title: "Rename" },
    el("span", { "aria-hidden": "true", text: "✎" }));
  const remove = el("button", { type: "button", class: "icon-button small", "aria-label": `Delete “${title}”`, title: "Delete" },
    el("span", { "aria-hidden": "true", text: "×" }));
  const li = el("li", { class: "session", "data-session": s.id }, open, el("span", { class: "session-tools" }, rename, remove));
  rename.addEventListener("click", () => startRename(li, s));
  remove.addEventListener("click", () => confirmDelete(li, s));
  return li;
}

function startRename(li, s) {
  const input = el("input", { type: "text", class: "rename", value: s.title, "aria-label": "New session name", maxlength: "200" });
  const form = el("form", { class: "rename-form" }, input);
  li.replaceChildren(form);
  input.focus();
  input.select();
  const done = () => renderSessions();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      await api(`/v1/sessions/${encodeURIComponent(s.id)}`, { method: "PATCH", body: { title: input.value } });
      await loadSessions();
      setStatus("session renamed");
    } catch (e) {
      setStatus(`could not rename: ${e.message}`);
      done();
    }
  });
  input.addEventListener("keydown", (ev) => { if (ev.key === "Escape") { ev.stopPropagation(); done(); } });
}

function confirmDelete(li, s) {
  const yes = el("button", { type: "button", class: "danger", text: "Delete" });
  const no = el("button", { type: "button", text: "Keep" });
  li.replaceChildren(el("div", { class: "confirm", role: "group", "aria-label": "Delete this session?" },
    el("span", { text: `Delete “${s.title || "Untitled session"}”? Approvals stay in the audit log.` }), yes, no));
  no.focus();
  no.addEventListener("click", () => renderSessions());
  yes.addEventListener("click", async () => {
    try {
      await api(`/v1/sessions/${encodeURIComponent(s.id)}`, { method: "DELETE" });
      if (state.sessionId === s.id) newChat();
      await loadSessions();
      setStatus("session deleted");
    } catch (e) {
      setStatus(`could not delete: ${e.message}`);
      renderSessions();
    }
  });
}

async function openSession(id) {
  if (state.runId) return;
  state.sessionId = id;
  const [{ turns }, session] = await Promise.all([
    (await api(`/v1/sessions/${encodeURIComponent(id)}/turns`)).json(),
    (await api(`/v1/sessions/${encodeURIComponent(id)}`)).json(),
  ]);
  $("#messages").replaceChildren();
  clearPlan();
  closeViewer();
  const ws = workspaceById(session.workspace_id);
  if (ws) { $("#workspace").value = ws.root_path; showProfile(); }
  const replays = [];
  const answered = new Set(turns.filter((t) => t.role === "assistant").map((t) => t.run_id));
  for (const t of turns) {
    if (t.role === "user") {
      addUserMessage(t.content);
      // A run that left no answer (cancelled, failed early) still shows how it ended.
      if (t.run_id && !answered.has(t.run_id)) replays.push([addAssistantMessage(session.workspace_id), t.run_id]);
      continue;
    }
    const view = addAssistantMessage(session.workspace_id);
    view.text = t.content;
    renderAnswer(view);
    if (t.run_id) replays.push([view, t.run_id]);
  }
  updateEmpty();
  renderSessions();
  // One stream at a time: the server caps open event streams.
  for (const [view, runId] of replays) {
    if (state.sessionId !== id) return;
    await replay(view, runId).catch(() => {});
  }
  $("#messages").lastElementChild?.scrollIntoView({ block: "end" });
}

// A finished run's stored events give back its citations, feed and status.
async function replay(view, runId) {
  view.replaying = true;
  const resp = await api(`/v1/runs/${encodeURIComponent(runId)}/events`);
  await readEvents(resp, (e) => handle(view, e));
  view.replaying = false;
  if (view.approvals.querySelector(".changes")) await refreshChanges(view, runId);
}

// The stored events end where the run ended; a change set undone since then
// shows its state now, so no Undo is offered twice.
async function refreshChanges(view, runId) {
  const resp = await api(`/v1/runs/${encodeURIComponent(runId)}/changes`);
  for (const set of (await resp.json()).change_sets) {
    const card = view.approvals.querySelector(`[data-change-set="${CSS.escape(set.change_set)}"]`);
    if (card && card.dataset.state !== set.state) showChanges(view, set);
  }
}

function newChat() {
  state.sessionId = null;
  $("#messages").replaceChildren();
  clearPlan();
  closeViewer();
  updateEmpty();
  renderSessions();
}

$("#new-chat").addEventListener("click", () => {
  if (state.runId) return;
  newChat();
  $("#message").focus();
});

// Messages.

function updateEmpty() {
  $("#empty").hidden = $("#messages").children.length > 0;
}

function addUserMessage(text) {
  const li = el("li", { class: "user" }, el("div", { class: "bubble", text }));
  $("#messages").append(li);
  updateEmpty();
  li.scrollIntoView({ block: "end" });
}

function addAssistantMessage(workspaceId) {
  const answer = el("div", { class: "answer markdown" });
  const approvals = el("div", { class: "approvals" });
  const citations = el("ol", { class: "citations", "aria-label": "Sources" });
  const media = el("div", { class: "media" });
  const feedList = el("ul", { class: "activity" });
  const feedSummary = el("summary", { text: "What Capstan is doing" });
  const feed = el("details", { class: "feed", hidden: "" }, feedSummary, feedList);
  const status = el("div", { class: "run-status" });
  const copy = el("button", { type: "button", class: "copy-answer small", hidden: "", text: "Copy answer" });
  const footer = el("div", { class: "answer-tools" }, status, copy);
  const li = el("li", { class: "assistant" }, approvals, answer, media, citations, feed, footer);
  $("#messages").append(li);
  updateEmpty();
  const view = {
    li, answer, approvals, citations, media, feedList, feed, feedSummary, status, copy,
    text: "", cites: [], workspaceId, scheduled: false, replaying: false, steps: 0,
  };
  copy.addEventListener("click", () => copyText(copy, view.text));
  return view;
}

// Renders the answer's Markdown; while it streams, once per frame at most.
function scheduleRender(view) {
  if (view.scheduled) return;
  view.scheduled = true;
  requestAnimationFrame(() => {
    view.scheduled = false;
    renderAnswer(view);
  });
}

function renderAnswer(view) {
  const cited = new Set(view.cites.map((c) => c.n));
  const frag = CapstanMarkdown.render(view.text, cited, (n) => citeLink(view, n));
  decorate(frag, view);
  view.answer.replaceChildren(frag);
  view.copy.hidden = !view.text;
}

// The page's own controls on rendered Markdown: copy buttons on code blocks,
// scrollable tables, workspace-file links.
function decorate(frag, view) {
  for (const pre of frag.querySelectorAll("pre")) {
    const code = pre.querySelector("code");
    const lang = code?.dataset.lang || "";
    const button = el("button", { type: "button", class: "copy-code small", text: "Copy", title: `Copy the ${lang || "code"}` });
    button.addEventListener("click", () => copyText(button, code ? code.textContent : pre.textContent));
    const head = el("div", { class: "code-head" }, el("span", { class: "muted", text: lang || "text" }), button);
    const wrap = el("div", { class: "code-block" });
    pre.replaceWith(wrap);
    wrap.append(head, pre);
  }
  for (const table of frag.querySelectorAll("table")) {
    const wrap = el("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Table" });
    table.replaceWith(wrap);
    wrap.append(table);
  }
  for (const a of frag.querySelectorAll("a.file-link")) {
    a.addEventListener("click", (ev) => {
      ev.preventDefault();
      openViewer(view, { path: a.dataset.file, line_start: 0, line_end: 0, heading: "" }, a);
    });
  }
}

async function copyText(button, text) {
  const label = button.textContent;
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch (_) {
    button.textContent = "Copy failed";
  }
  setTimeout(() => { button.textContent = label; }, 1500);
}

function citeLabel(c) {
  const lines = c.line_start ? `:${c.line_start}${c.line_end && c.line_end !== c.line_start ? `–${c.line_end}` : ""}` : "";
  return `${c.path}${lines}`;
}

function citeLink(view, n) {
  const c = view.cites.find((x) => x.n === n);
  const a = el("a", { href: "#", class: "cite", text: `[${n}]`, title: c ? `Open ${citeLabel(c)}` : "" });
  a.addEventListener("click", (ev) => { ev.preventDefault(); if (c) openViewer(view, c, a); });
  return a;
}

function showCitations(view) {
  view.citations.replaceChildren(...view.cites.map((c) => {
    const a = el("a", { href: "#", class: "citation" },
      el("span", { class: "cite-path", text: citeLabel(c) }),
      c.heading ? el("span", { class: "muted", text: ` — ${c.heading}` }) : "");
    a.addEventListener("click", (ev) => { ev.preventDefault(); openViewer(view, c, a); });
    return el("li", { value: String(c.n) }, a);
  }));
}

// The side viewer: the cited lines of a workspace file, as plain text.

let viewerReturn = null;

async function openViewer(view, cite, from) {
  viewerReturn = from;
  const box = $("#viewer");
  const wsId = view.workspaceId || selectedWorkspace()?.id;
  $("#viewer-title").textContent = citeLabel(cite);
  $("#viewer-note").textContent = "Loading…";
  $("#viewer-lines").replaceChildren();
  box.hidden = false;
  document.body.classList.add("viewer-open");
  $("#viewer-title").focus();
  if (!wsId) {
    $("#viewer-note").textContent = "This answer has no workspace to open files from.";
    return;
  }
  try {
    const file = await (await api(`/v1/workspaces/${encodeURIComponent(wsId)}/file?path=${encodeURIComponent(cite.path)}`)).json();
    const list = $("#viewer-lines");
    let first = null;
    file.lines.forEach((text, i) => {
      const n = i + 1;
      const cited = cite.line_start && n >= cite.line_start && n <= (cite.line_end || cite.line_start);
      const li = el("li", { value: String(n), class: cited ? "cited" : "" }, el("code", { text: text || " " }));
      if (cited && !first) first = li;
      list.append(li);
    });
    const ws = workspaceById(wsId);
    $("#viewer-note").textContent = `${file.lines.length} lines${ws ? ` in ${ws.name}` : ""}${cite.heading ? ` · ${cite.heading}` : ""}${file.lossy ? " · not valid UTF-8, shown approximately" : ""}`;
    (first || list.firstElementChild)?.scrollIntoView({ block: "center" });
  } catch (e) {
    $("#viewer-note").textContent = `Cannot open ${cite.path}: ${e.message}`;
  }
}

function closeViewer() {
  if ($("#viewer").hidden) return;
  $("#viewer").hidden = true;
  document.body.classList.remove("viewer-open");
  if (viewerReturn && document.contains(viewerReturn)) viewerReturn.focus();
  viewerReturn = null;
}
$("#viewer-close").addEventListener("click", closeViewer);

// The plan panel.

function clearPlan() {
  $("#plan-tasks").replaceChildren();
  $("#plan-empty").hidden = false;
  document.body.classList.remove("has-plan");
}

function renderPlan(tasks) {
  $("#plan-empty").hidden = true;
  document.body.classList.add("has-plan");
  const list = $("#plan-tasks");
  list.replaceChildren();
  for (const t of tasks) {
    const badge = el("span", { class: "badge pending", text: "pending" });
    const trace = el("div", { class: "trace" },
      el("p", { class: "note", text: `${t.kind} · ${t.operation}` }));
    const details = el("details", {},
      el("summary", {}, badge, el("span", { class: "task-title", text: t.title || `${t.kind} ${t.operation}` })), trace);
    list.append(el("li", { "data-task": t.id }, details));
  }
}

function planTask(id) {
  return document.querySelector(`#plan-tasks li[data-task="${CSS.escape(id)}"]`);
}

function setTaskStatus(id, status) {
  const li = planTask(id);
  if (!li) return;
  const badge = li.querySelector(".badge");
  badge.className = `badge ${status}`;
  badge.textContent = status;
}

// One line per connection the egress proxy decided: the audit the feed and
// SQLite keep, in the task's trace.
function networkLine(ev) {
  const how = ev.verdict === "allowed"
    ? `allowed (${ev.decided_by}${ev.rule ? `, rule ${ev.rule}` : ""})`
    : `${ev.verdict} (${ev.decided_by})${ev.reason ? `: ${ev.reason}` : ""}`;
  return `network: ${ev.host}:${ev.port} ${how} · ${ev.bytes_up} B up, ${ev.bytes_down} B down · ${ev.duration_ms} ms`;
}

function addTraceNote(id, text) {
  const li = planTask(id);
  if (li) li.querySelector(".trace").append(el("p", { class: "note", text }));
}

// A task's summary repeats its commands' output; the steps show it once, in
// monospace, so a task with steps keeps only the summary's first line.
function addTaskSummary(id, summary) {
  const li = planTask(id);
  if (!li) return;
  const hasSteps = li.querySelector(".trace .step");
  addTraceNote(id, hasSteps ? summary.split("\n")[0] : summary);
}

// What a tool answered besides text (an MCP server's images, resources):
// shown with the answer, since the feed folds when the run ends. The server
// is not trusted: only raster images of a known type, as base64 `data:` URLs
// of bounded size, become <img> (an SVG could carry script if ever opened
// on its own); everything else is named, never loaded.
const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
const MAX_IMAGE_BASE64 = 8 * 1024 * 1024;

function showMedia(view, ev) {
  const blocks = ev.data && Array.isArray(ev.data.content) ? ev.data.content : [];
  const source = (view.kinds && view.kinds[ev.task_id]) || ev.task_id;
  for (const block of blocks) {
    if (!block || typeof block !== "object") continue;
    const data = typeof block.data === "string" ? block.data : "";
    if (block.type === "image" && IMAGE_TYPES.has(block.mimeType) && data.length <= MAX_IMAGE_BASE64
        && /^[A-Za-z0-9+/]+={0,2}$/.test(data)) {
      const img = el("img", { src: `data:${block.mimeType};base64,${data}`, alt: `Image from ${source}` });
      view.media.append(el("figure", {}, img, el("figcaption", { class: "muted", text: `from ${source}` })));
    } else {
      const what = block.type === "resource" || block.type === "resource_link"
        ? `${block.type === "resource" ? "resource" : "link"} ${block.resource?.uri || block.uri || ""}`
        : `${String(block.type)} content${block.mimeType ? ` (${String(block.mimeType)})` : ""}`;
      view.media.append(el("p", { class: "muted", text: `${source} also returned ${what.trim()}; it is kept with the run.` }));
    }
  }
}

// What a command was granted (the sandbox enforced exactly this), in the
// words the terminal uses (capstan_protocol::Grant::describe).
function grantText(g) {
  const by = {
    none: "nothing granted", profile: "granted by the profile", allow_rule: "granted by an allow rule",
    session: "granted for this session", approval: "granted by approval", flag: "granted by --approve all",
  }[g.source] || String(g.source);
  return `${g.write ? "writable" : "read-only"} workspace, ${g.network ? "network" : "no network"} (${by})`;
}

function addTerminalStep(ev) {
  const li = planTask(ev.task_id);
  if (!li) return;
  const outcome = ev.timed_out ? "timed out"
    : ev.exit_code !== undefined ? `exit ${ev.exit_code}`
    : ev.signal !== undefined ? `signal ${ev.signal}` : "";
  const head = el("div", { class: "step-head" },
    el("code", { text: `$ ${ev.command}` }),
    el("span", { class: "muted", text: `${outcome} · ${ev.duration_ms} ms · ${ev.risk}` }),
    ev.grant ? el("span", { class: "muted grant", "data-grant": ev.grant.source, text: `ran with: ${grantText(ev.grant)}` }) : "");
  let output = ev.output_tail || "(no output)";
  if (ev.truncated_bytes) output = `… ${ev.truncated_bytes} earlier bytes not shown\n${output}`;
  li.querySelector(".trace").append(el("div", { class: "step" }, head, el("pre", { text: output, tabindex: "0" })));
}

// Approvals: each reason once; the buttons give way to the decision. The card
// takes focus, not its Approve button, so an Enter meant for the message box
// cannot approve: Tab reaches the buttons, Enter or Space presses one.

function showApproval(view, ev) {
  const decision = el("p", { class: "decision", role: "status" });
  const buttons = el("div", { class: "buttons" });
  const titleId = `approval-${ev.approval_id}`;
  const seen = new Set([String(ev.risk).toLowerCase()]);
  const reasons = (ev.reasons || []).filter((r) => {
    const key = r.trim().toLowerCase();
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
  const card = el("div", { class: "approval", "data-approval": ev.approval_id, role: "group", tabindex: "-1", "aria-labelledby": titleId },
    el("p", { id: titleId, class: "approval-title" },
      el("strong", { text: `Approve this ${ev.risk} command?` })),
    el("pre", { class: "approval-command", text: ev.command || ev.action }),
    ev.cwd && ev.cwd !== "." ? el("p", { class: "muted small-text", text: `in ${ev.cwd}` }) : "",
    reasons.length ? el("ul", {}, ...reasons.map((r) => el("li", { text: r }))) : "",
    buttons, decision);
  const choices = [
    ["Approve", "approved", "primary"],
    ["Always this session", "approved-for-session", ""],
    ["Deny", "denied", "danger"],
  ];
  // Offered only where a rule can be written (a host no [network] rule names):
  // `always` is that rule.
  if (typeof ev.always === "string" && ev.always) {
    choices.splice(2, 0, [`Always for this workspace (${ev.always})`, "approved-always", ""]);
  }
  const send = async (value) => {
    for (const x of buttons.querySelectorAll("button")) x.disabled = true;
    try {
      await api(`/v1/approvals/${encodeURIComponent(ev.approval_id)}`, { method: "POST", body: { decision: value } });
    } catch (e) {
      decision.textContent = `could not send the decision: ${e.message}`;
      for (const x of buttons.querySelectorAll("button")) x.disabled = false;
    }
  };
  for (const [label, value, cls] of choices) {
    const b = el("button", { type: "button", class: cls, text: label });
    b.addEventListener("click", () => send(value));
    buttons.append(b);
  }
  view.approvals.append(card);
  card.scrollIntoView({ block: "nearest" });
  if (!view.replaying) card.focus();
}

function approvalDecided(view, ev) {
  const card = view.approvals.querySelector(`[data-approval="${CSS.escape(ev.approval_id)}"]`);
  if (!card) return;
  const hadFocus = card.contains(document.activeElement);
  card.querySelector(".buttons")?.remove();
  card.classList.add(ev.decision.startsWith("approved") ? "approved" : "denied");
  card.querySelector(".decision").textContent = `${ev.decision} (by ${ev.by}${ev.via ? ` via ${ev.via}` : ""})`;
  if (hadFocus) $("#message").focus();
}

// The activity feed: open while the run works, one line once it ends.

function addFeed(view, text, cls) {
  view.feed.hidden = false;
  if (!view.replaying && !view.ended) view.feed.open = true;
  view.steps += 1;
  view.lastFeed = text;
  view.feedList.append(el("li", { class: cls || "", text }));
}

function endFeed(view, word) {
  view.ended = true;
  view.li.classList.add("ended");
  view.feed.open = false;
  if (!view.steps) return;
  const steps = `${view.steps} step${view.steps === 1 ? "" : "s"}`;
  view.feedSummary.textContent = `What Capstan did: ${steps}${view.lastFeed ? ` · ${view.lastFeed}` : ""}`;
  view.feedSummary.title = `${word}; open to see every step`;
}

// Workspace changes: one card per change set (the latest state replaces
// the pending one), the files with their diffs, and Undo while applied.
const KIND_WORDS = { created: "created", modified: "modified", deleted: "deleted", renamed: "renamed", mode_changed: "mode changed" };

function showChanges(view, ev) {
  const old = view.approvals.querySelector(`[data-change-set="${CSS.escape(ev.change_set)}"]`);
  const n = ev.files.length;
  const title = {
    pending: "Changes waiting for your review",
    applied: "Changes applied",
    discarded: "Changes discarded",
    undone: "Changes undone",
  }[ev.state] || "Changes";
  const status = el("p", { class: "decision", role: "status" });
  const list = el("ul", { class: "change-files" }, ...ev.files.map((f) => {
    const label = `${KIND_WORDS[f.kind] || f.kind} ${f.path}${f.from ? ` (from ${f.from})` : ""}`;
    if (!f.diff && !f.summary) return el("li", { text: label });
    return el("li", {}, el("details", {},
      el("summary", { text: label }),
      el("pre", { class: "diff", text: f.diff || f.summary })));
  }));
  const buttons = el("div", { class: "buttons" });
  const card = el("div", { class: "approval changes", "data-change-set": ev.change_set, "data-state": ev.state, role: "group" },
    el("p", { class: "approval-title" }, el("strong", { text: `${title}: ${n} path${n === 1 ? "" : "s"}` })),
    el("p", { class: "muted small-text", text: `from \`${ev.source}\` · change set ${ev.change_set}` }),
    list, buttons, status);
  const undo = async (body) => {
    for (const x of buttons.querySelectorAll("button")) x.disabled = true;
    try {
      const resp = await api(`/v1/changes/${encodeURIComponent(ev.change_set)}/undo`, { method: "POST", body });
      const report = await resp.json();
      card.querySelector(".approval-title strong").textContent = `Changes undone: ${n} path${n === 1 ? "" : "s"}`;
      card.dataset.state = "undone";
      status.textContent = `undone: ${report.restored.length} path(s) restored` +
        (report.refused.length ? `; left as they are: ${report.refused.map((r) => r.path).join(", ")}` : "");
      buttons.replaceChildren();
    } catch (e) {
      // The API's hint names request fields; here the buttons are the way on.
      status.textContent = e.message.startsWith("nothing undone")
        ? `${e.message.split("; send")[0]}. “Undo the others” restores the rest and leaves ${e.message.includes(", ") ? "those files as they are" : "that file as it is"} now.`
        : e.message;
      for (const x of buttons.querySelectorAll("button")) x.disabled = false;
      if (!body.keep_changed && !buttons.querySelector(".keep")) {
        const keep = el("button", { type: "button", class: "keep", text: "Undo the others" });
        keep.addEventListener("click", () => undo({ keep_changed: true }));
        buttons.append(keep);
      }
    }
  };
  if (ev.state === "applied") {
    const b = el("button", { type: "button", class: "danger", text: "Undo" });
    b.addEventListener("click", () => undo({}));
    buttons.append(b);
  }
  if (old) old.replaceWith(card); else view.approvals.append(card);
}

// A run.

function usageText(u) {
  const cost = u.cost_usd !== undefined ? ` · $${u.cost_usd.toFixed(4)}` : "";
  return `${u.input_tokens} in / ${u.output_tokens} out tokens${u.estimated ? " (estimated)" : ""}${cost}`;
}

// Feed lines that repeat what the card or the trace already shows.
const MIRRORED = new Set(["approval.waiting", "approval", "plan"]);

function handle(view, ev) {
  switch (ev.type) {
    case "run.started":
      if (view.replaying) break;
      state.runId = ev.run_id;
      state.sessionId = ev.session_id || state.sessionId;
      $("#cancel").disabled = false;
      setStatus("running… (Esc cancels)");
      break;
    case "activity":
      if (!MIRRORED.has(ev.kind)) addFeed(view, ev.message);
      break;
    case "run.resumed":
      addFeed(view, `resumed: ${ev.message}`);
      break;
    case "workspace.required":
      addFeed(view, `workspace required: ${ev.message}`, "error");
      break;
    case "plan.created":
      view.kinds = Object.fromEntries(ev.tasks.map((t) => [t.id, t.kind]));
      renderPlan(ev.tasks);
      break;
    case "plan.updated":
      setTaskStatus(ev.task_id, ev.status);
      break;
    case "task.failed":
      addTraceNote(ev.task_id, `failed (${ev.reason}): ${ev.message}`);
      break;
    case "task.skipped":
      addTraceNote(ev.task_id, `skipped: ${ev.reason}`);
      break;
    case "task.completed":
      addTaskSummary(ev.task_id, ev.summary);
      showMedia(view, ev);
      break;
    case "capability.status":
      addTraceNote(ev.task_id, `${ev.status}: ${ev.message}`);
      break;
    case "terminal.step":
      addTerminalStep(ev);
      break;
    case "network.connect":
      addTraceNote(ev.task_id, networkLine(ev));
      break;
    case "workspace.changes":
      showChanges(view, ev);
      break;
    case "approval.requested":
      if (!ev.approval_id) break;
      showApproval(view, ev);
      break;
    case "approval.decided":
      approvalDecided(view, ev);
      break;
    case "response.delta":
      if (view.replaying) break;
      view.text += ev.text;
      scheduleRender(view);
      break;
    case "response.completed":
      view.text = ev.text;
      view.cites = ev.citations || [];
      renderAnswer(view);
      showCitations(view);
      break;
    case "budget.warning":
      addFeed(view, ev.message, "error");
      break;
    case "run.completed":
      view.status.textContent = `completed · ${usageText(ev.usage)}`;
      endFeed(view, "completed");
      break;
    case "run.failed":
      view.status.textContent = `failed (${ev.reason}): ${ev.message} · ${usageText(ev.usage)}`;
      view.status.classList.add("failed");
      endFeed(view, "failed");
      break;
    case "run.cancelled":
      view.status.textContent = `cancelled · ${usageText(ev.usage)}`;
      endFeed(view, "cancelled");
      break;
  }
}

// SSE over fetch: EventSource cannot POST. Frames are separated by a blank
// line; only `data:` lines carry the envelope.
async function readEvents(resp, onEvent) {
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (data) onEvent(JSON.parse(data));
    }
  }
}

$("#composer").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const message = $("#message").value.trim();
  if (!message || state.runId) return;
  $("#message").value = "";
  autosize();
  $("#send").disabled = true;
  addUserMessage(message);
  clearPlan();
  closeViewer();
  const ws = selectedWorkspace();
  const view = addAssistantMessage(ws?.id);
  const body = { message };
  if (state.sessionId) body.session_id = state.sessionId;
  if (ws) body.workspace = ws.root_path;
  try {
    const resp = await api("/v1/runs", { method: "POST", body });
    await readEvents(resp, (e) => {
      handle(view, e);
      if (e.type === "response.delta" || e.type === "response.completed") view.li.scrollIntoView({ block: "end" });
    });
    setStatus("");
  } catch (e) {
    view.status.textContent = e.message;
    view.status.classList.add("failed");
    setStatus("");
  } finally {
    state.runId = null;
    $("#send").disabled = false;
    $("#cancel").disabled = true;
    loadSessions().catch(() => {});
  }
});

// The composer grows with its text up to a third of the screen.
function autosize() {
  const box = $("#message");
  box.style.height = "auto";
  box.style.height = `${Math.min(box.scrollHeight + 2, window.innerHeight / 3)}px`;
}
$("#message").addEventListener("input", autosize);

$("#message").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    $("#composer").requestSubmit();
  }
});

async function cancelRun() {
  if (!state.runId) return;
  $("#cancel").disabled = true;
  setStatus("cancelling…");
  try {
    await api(`/v1/runs/${encodeURIComponent(state.runId)}/cancel`, { method: "POST" });
  } catch (e) {
    setStatus(`could not cancel: ${e.message}`);
  }
}
$("#cancel").addEventListener("click", cancelRun);

// Esc: close the viewer, then the drawer, then cancel the run.
document.addEventListener("keydown", (ev) => {
  if (ev.key !== "Escape" || ev.defaultPrevented) return;
  if (!$("#viewer").hidden) closeViewer();
  else if (document.body.classList.contains("drawer-open")) { setDrawer(false); $("#drawer-open").focus(); }
  else if (state.runId) cancelRun();
});

$("#message").focus();
updateEmpty();
Promise.all([loadWorkspaces(), loadSessions()])
  .then(renderSessions)
  .catch((e) => setStatus(e.message));
