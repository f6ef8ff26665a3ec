// The Capstan web chat: plain JavaScript, no build step. It speaks the HTTP
// API (POST /v1/runs answers with the run's SSE stream) and renders the event
// protocol of docs/EVENTS.md: the answer from response.*, the activity feed
// from `activity`, the plan panel from plan.* and terminal.step, approvals
// from approval.*. Every server string goes through textContent, never HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
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
};

function setStatus(text) {
  $("#status").textContent = text;
}

// Workspaces.

async function loadWorkspaces(select) {
  const { workspaces } = await (await api("/v1/workspaces")).json();
  state.workspaces = workspaces;
  const picker = $("#workspace");
  picker.replaceChildren(el("option", { value: "", text: "(none)" }));
  for (const ws of workspaces) {
    picker.append(el("option", { value: ws.root_path, text: `${ws.name} — ${ws.root_path}` }));
  }
  const wanted = select ?? localStorage.getItem("capstan-workspace") ?? "";
  if ([...picker.options].some((o) => o.value === wanted)) picker.value = wanted;
  showProfile();
}

function showProfile() {
  const ws = state.workspaces.find((w) => w.root_path === $("#workspace").value);
  $("#profile").textContent = ws ? `policy: ${ws.policy_profile}` : "";
  localStorage.setItem("capstan-workspace", $("#workspace").value);
}

$("#workspace").addEventListener("change", showProfile);

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

// Sessions.

async function loadSessions() {
  const { sessions } = await (await api("/v1/sessions?limit=30")).json();
  const list = $("#sessions");
  list.replaceChildren();
  for (const s of sessions) {
    const button = el("button", { type: "button", text: s.title || s.id, title: s.id });
    if (s.id === state.sessionId) button.setAttribute("aria-current", "true");
    button.addEventListener("click", () => openSession(s.id));
    list.append(el("li", {}, button));
  }
}

async function openSession(id) {
  if (state.runId) return;
  state.sessionId = id;
  const { turns } = await (await api(`/v1/sessions/${encodeURIComponent(id)}/turns`)).json();
  $("#messages").replaceChildren();
  clearPlan();
  for (const t of turns) {
    if (t.role === "user") addUserMessage(t.content);
    else addAssistantMessage().answer.textContent = t.content;
  }
  await loadSessions();
}

$("#new-chat").addEventListener("click", () => {
  if (state.runId) return;
  state.sessionId = null;
  $("#messages").replaceChildren();
  clearPlan();
  loadSessions();
  $("#message").focus();
});

// Messages.

function addUserMessage(text) {
  const li = el("li", { class: "user" }, el("div", { class: "bubble", text }));
  $("#messages").append(li);
  li.scrollIntoView({ block: "end" });
}

function addAssistantMessage() {
  const answer = el("div", { class: "answer", "aria-live": "polite" });
  const approvals = el("div", { class: "approvals" });
  const citations = el("ol", { class: "citations", "aria-label": "Sources" });
  const feedList = el("ul", { class: "activity" });
  const feed = el("details", { class: "feed", open: "" },
    el("summary", { text: "What Capstan did" }), feedList);
  const status = el("div", { class: "run-status" });
  const li = el("li", { class: "assistant" }, approvals, answer, citations, feed, status);
  $("#messages").append(li);
  return { li, answer, approvals, citations, feedList, feed, status };
}

// The plan panel.

function clearPlan() {
  $("#plan-tasks").replaceChildren();
  $("#plan-empty").hidden = false;
}

function renderPlan(tasks) {
  $("#plan-empty").hidden = true;
  const list = $("#plan-tasks");
  list.replaceChildren();
  for (const t of tasks) {
    const badge = el("span", { class: "badge pending", text: "pending" });
    const trace = el("div", { class: "trace" },
      el("p", { class: "note", text: `${t.kind} · ${t.operation}` }));
    const details = el("details", {},
      el("summary", {}, badge, el("span", { text: t.title || `${t.kind} ${t.operation}` })), trace);
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

function addTraceNote(id, text) {
  const li = planTask(id);
  if (li) li.querySelector(".trace").append(el("p", { class: "note", text }));
}

function addTerminalStep(ev) {
  const li = planTask(ev.task_id);
  if (!li) return;
  const outcome = ev.timed_out ? "timed out"
    : ev.exit_code !== undefined ? `exit ${ev.exit_code}`
    : ev.signal !== undefined ? `signal ${ev.signal}` : "";
  const head = el("div", { class: "step-head" },
    el("code", { text: `$ ${ev.command}` }),
    el("span", { class: "muted", text: `${outcome} · ${ev.duration_ms} ms · ${ev.risk}` }));
  let output = ev.output_tail || "(no output)";
  if (ev.truncated_bytes) output = `… ${ev.truncated_bytes} earlier bytes not shown\n${output}`;
  li.querySelector(".trace").append(el("div", { class: "step" }, head, el("pre", { text: output })));
}

// Approvals.

function showApproval(view, ev) {
  const decision = el("span", { class: "decision", role: "status" });
  const buttons = el("div", { class: "buttons" });
  const card = el("div", { class: "approval", "data-approval": ev.approval_id },
    el("div", {}, el("strong", { text: `Approval needed (${ev.risk}): ` }), el("code", { text: ev.command || ev.action })),
    el("ul", {}, ...ev.reasons.map((r) => el("li", { text: r }))),
    buttons, decision);
  const choices = [
    ["Approve", "approved", "primary"],
    ["Always this session", "approved-for-session", ""],
    ["Deny", "denied", ""],
  ];
  for (const [label, value, cls] of choices) {
    const b = el("button", { type: "button", class: cls, text: label });
    b.addEventListener("click", async () => {
      for (const x of buttons.querySelectorAll("button")) x.disabled = true;
      try {
        await api(`/v1/approvals/${encodeURIComponent(ev.approval_id)}`, { method: "POST", body: { decision: value } });
      } catch (e) {
        decision.textContent = `could not send the decision: ${e.message}`;
        for (const x of buttons.querySelectorAll("button")) x.disabled = false;
      }
    });
    buttons.append(b);
  }
  view.approvals.append(card);
  buttons.querySelector("button").focus();
}

function approvalDecided(view, ev) {
  const card = view.approvals.querySelector(`[data-approval="${CSS.escape(ev.approval_id)}"]`);
  if (!card) return;
  for (const b of card.querySelectorAll("button")) b.disabled = true;
  card.querySelector(".decision").textContent = `${ev.decision} (by ${ev.by})`;
}

// A run.

function usageText(u) {
  const cost = u.cost_usd !== undefined ? ` · $${u.cost_usd.toFixed(4)}` : "";
  return `${u.input_tokens} in / ${u.output_tokens} out tokens${u.estimated ? " (estimated)" : ""}${cost}`;
}

function handle(view, ev) {
  switch (ev.type) {
    case "run.started":
      state.runId = ev.run_id;
      state.sessionId = ev.session_id || state.sessionId;
      $("#cancel").disabled = false;
      setStatus("running…");
      break;
    case "activity":
      view.feedList.append(el("li", { text: ev.message }));
      break;
    case "workspace.required":
      view.feedList.append(el("li", { class: "error", text: `workspace required: ${ev.message}` }));
      break;
    case "plan.created":
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
      addTraceNote(ev.task_id, ev.summary);
      break;
    case "capability.status":
      addTraceNote(ev.task_id, `${ev.status}: ${ev.message}`);
      break;
    case "terminal.step":
      addTerminalStep(ev);
      break;
    case "approval.requested":
      if (!ev.approval_id) break;
      showApproval(view, ev);
      break;
    case "approval.decided":
      approvalDecided(view, ev);
      break;
    case "response.delta":
      view.answer.textContent += ev.text;
      break;
    case "response.completed":
      view.answer.textContent = ev.text;
      view.citations.replaceChildren(...ev.citations.map((c) =>
        el("li", { value: String(c.n), text: `${c.path}:${c.line_start}-${c.line_end}${c.heading ? ` — ${c.heading}` : ""}` })));
      break;
    case "budget.warning":
      view.feedList.append(el("li", { class: "error", text: ev.message }));
      break;
    case "run.completed":
      view.status.textContent = `completed · ${usageText(ev.usage)}`;
      break;
    case "run.failed":
      view.status.textContent = `failed (${ev.reason}): ${ev.message} · ${usageText(ev.usage)}`;
      view.status.classList.add("failed");
      break;
    case "run.cancelled":
      view.status.textContent = `cancelled · ${usageText(ev.usage)}`;
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
  $("#send").disabled = true;
  addUserMessage(message);
  clearPlan();
  const view = addAssistantMessage();
  const body = { message };
  if (state.sessionId) body.session_id = state.sessionId;
  const workspace = $("#workspace").value;
  if (workspace) body.workspace = workspace;
  try {
    const resp = await api("/v1/runs", { method: "POST", body });
    await readEvents(resp, (e) => {
      handle(view, e);
      view.li.scrollIntoView({ block: "end" });
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

$("#message").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    $("#composer").requestSubmit();
  }
});

$("#cancel").addEventListener("click", async () => {
  if (!state.runId) return;
  $("#cancel").disabled = true;
  setStatus("cancelling…");
  try {
    await api(`/v1/runs/${encodeURIComponent(state.runId)}/cancel`, { method: "POST" });
  } catch (e) {
    setStatus(`could not cancel: ${e.message}`);
  }
});

Promise.all([loadWorkspaces(), loadSessions()]).catch((e) => setStatus(e.message));
