// app.js — tokroute's web UI: sends POST /api/generate, reads the server-sent events from the response body (fetch,
// so the request can carry JSON and be cancelled), paints tokens as they arrive (LLM tokens red, fallbacks marked),
// draws the router score per token against the τ each token was decided with (it moves under a routed-share
// target), and fills the profiling table from the final event (with the budget: target, share reached, final τ).
"use strict";

const $ = (id) => document.getElementById(id);
const els = {
  form: $("form"), prompt: $("prompt"), mode: $("mode"), tau: $("tau"), tauValue: $("tau-value"),
  maxTokens: $("max-tokens"), targetRouted: $("target-routed"), maxRouted: $("max-routed"), policy: $("policy"), policyLabel: $("policy-label"), chat: $("chat"),
  chatLabel: $("chat-label"), start: $("start"), stop: $("stop"), compare: $("compare"), status: $("status"),
  error: $("error"), output: $("output"), chart: $("chart"), profile: $("profile"), single: $("single"),
  compareView: $("compare-view"), tip: $("tip"), models: $("models"),
};
let info = null;
let running = [];          // runs in flight: {id, controller, ...}
// Redrawn when the window changes size: the last run's scores, with their own τ (tau null) or the slider's.
let lastChart = { scores: [], tau: 0.5 };

// ------------------------------------------------------------------ requests

// A server started with a key (--ui-key, needed when it listens beyond this machine) answers its API only with
// "Authorization: Bearer KEY": asked for once on a 401, kept for this tab's session.
function apiFetch(path, options = {}) {
  const key = sessionStorage.getItem("tokroute-key");
  const headers = Object.assign({}, options.headers || {}, key ? { Authorization: "Bearer " + key } : {});
  return fetch(path, Object.assign({}, options, { headers })).then((res) => {
    if (res.status !== 401 || options.retried) return res;
    const entered = window.prompt("This tokroute server needs its key (--ui-key):");
    if (!entered) return res;
    sessionStorage.setItem("tokroute-key", entered.trim());
    return apiFetch(path, Object.assign({}, options, { retried: true }));
  });
}

// The message of an error reply: OpenAI's {"error": {"message", "type", "param", "code"}}.
async function errorMessage(res) {
  let msg = res.status + " " + res.statusText;
  try {
    const e = (await res.json()).error;
    if (e && e.message) msg = e.message;
  } catch (e) { /* not JSON */ }
  return msg;
}

// ------------------------------------------------------------------ server-sent events over fetch

async function* readEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trim();
      }
      if (data) yield { event, data: JSON.parse(data) };
    }
  }
}

// ------------------------------------------------------------------ painting

function showError(message) {
  els.error.textContent = message;
  els.error.hidden = !message;
}

function tokenSpan(t) {
  const span = document.createElement("span");
  const fallback = t.source === "fallback";
  span.className = "tok " + t.source;
  span.textContent = t.text;
  span.dataset.score = t.score === null ? "" : t.score;
  span.dataset.tau = t.tau;
  span.dataset.source = t.source;
  if (t.slm_text !== undefined) span.dataset.slm = t.slm_text;
  if (fallback) span.dataset.fallback = "1";
  return span;
}

function tipText(span) {
  const d = span.dataset;
  const lines = [];
  lines.push(d.source === "llm" ? "from the LLM" : d.source === "fallback" ? "LLM unavailable: the SLM's token" : "from the SLM");
  lines.push("router score " + (d.score === "" ? "—" : Number(d.score).toFixed(3)) + "   τ " + Number(d.tau).toFixed(2));
  if (d.slm !== undefined) lines.push("SLM proposed " + JSON.stringify(d.slm));
  return lines.join("\n");
}

function onHover(ev) {
  const span = ev.target.closest && ev.target.closest(".tok[data-source]");
  if (!span || !span.closest(".output")) { els.tip.hidden = true; return; }
  els.tip.textContent = tipText(span);
  els.tip.hidden = false;
  const r = span.getBoundingClientRect();
  const x = Math.min(r.left, window.innerWidth - els.tip.offsetWidth - 8);
  const y = r.bottom + 6 + els.tip.offsetHeight > window.innerHeight ? r.top - els.tip.offsetHeight - 6 : r.bottom + 6;
  els.tip.style.left = Math.max(4, x) + "px";
  els.tip.style.top = y + "px";
}

const SVG = "http://www.w3.org/2000/svg";
// scores: [{score, source, tau}] per token. tau null: the τ line is each token's own τ (a step per token, moving
// under a routed-share target); a number: a flat line there (the slider's value, previewing what it would route).
function drawChart(svg, scores, tau) {
  // Drawn in the element's own pixels, so dots stay round and labels unstretched at any width.
  const W = Math.max(100, svg.clientWidth || 600), H = Math.max(60, svg.clientHeight || 140), pad = 8;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const n = Math.max(scores.length, 2);
  const x = (i) => pad + (i * (W - 2 * pad)) / (n - 1);
  const y = (s) => H - pad - Math.min(1, Math.max(0, s)) * (H - 2 * pad);
  svg.textContent = "";
  const perToken = tau === null && scores.length > 0;
  const lastTau = perToken ? scores[scores.length - 1].tau : tau === null ? 0.5 : tau;
  const tauLine = document.createElementNS(SVG, "polyline");
  tauLine.setAttribute("class", "tau");
  if (perToken) {
    const half = (W - 2 * pad) / (n - 1) / 2, steps = [];
    scores.forEach((p, i) => steps.push(`${(x(i) - half).toFixed(1)},${y(p.tau).toFixed(1)}`,
      `${(x(i) + half).toFixed(1)},${y(p.tau).toFixed(1)}`));
    tauLine.setAttribute("points", steps.join(" "));
    tauLine.dataset.taus = scores.map((p) => p.tau).join(" ");
  } else {
    tauLine.setAttribute("points", `0,${y(lastTau)} ${W},${y(lastTau)}`);
  }
  svg.appendChild(tauLine);
  const label = document.createElementNS(SVG, "text");
  label.setAttribute("x", W - 44); label.setAttribute("y", y(lastTau) < 22 ? y(lastTau) + 12 : y(lastTau) - 4);
  label.textContent = "τ " + lastTau.toFixed(2);
  svg.appendChild(label);
  for (const [v, text] of [[1, "1"], [0, "0"]]) {
    const t = document.createElementNS(SVG, "text");
    t.setAttribute("x", 2); t.setAttribute("y", v ? 10 : H - 2);
    t.textContent = text;
    svg.appendChild(t);
  }
  const pts = [];
  scores.forEach((p, i) => { if (p.score !== null) pts.push(x(i).toFixed(1) + "," + y(p.score).toFixed(1)); });
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("class", "score");
  line.setAttribute("points", pts.join(" "));
  svg.appendChild(line);
  scores.forEach((p, i) => {
    if (p.source === "slm" || p.score === null) return;
    const dot = document.createElementNS(SVG, "circle");
    dot.setAttribute("class", p.source === "fallback" ? "fallback" : "routed");
    dot.setAttribute("cx", x(i)); dot.setAttribute("cy", y(p.score)); dot.setAttribute("r", 2.5);
    svg.appendChild(dot);
  });
}

function fmtBytes(v) {
  if (v === null || v === undefined) return "—";
  return v < 10240 ? v + " B" : (v / 1024).toFixed(1) + " KiB";
}
function fmtMs(v) { return v === null || v === undefined ? "—" : v.toFixed(v < 10 ? 2 : 1) + " ms"; }
function fillProfile(table, d) {
  const rows = [
    ["time to first token", fmtMs(d.ttft_ms)],
    ["mean time between tokens", fmtMs(d.mean_tbt_ms)],
    ["tokens", String(d.n_tokens)],
    ["routed to the LLM", d.n_routed + " (" + d.routed_pct.toFixed(1) + "%)"],
    ["SLM time", fmtMs(d.slm_ms)],
    ["LLM + communication time", fmtMs(d.llm_ms)],
    ["total", fmtMs(d.total_ms)],
    ["LLM requests sent", d.llm_calls + (d.llm_failed ? " (" + d.llm_failed + " failed)" : "")],
    ["routed tokens waited for", d.llm_blocking + (d.llm_refused ? " (" + d.llm_refused + " refused at once: LLM down)" : "")],
    ["routed tokens answered ahead (by drafts)", d.lookahead_hits + " (" + d.draft_hits + ")"],
    ["bytes sent / received", fmtBytes(d.bytes_sent) + " / " + fmtBytes(d.bytes_received)],
  ];
  if (d.n_fallback) rows.splice(4, 0, ["LLM unavailable (fallbacks)", String(d.n_fallback)]);
  if (d.mode === "joint" && (d.target_routed > 0 || d.max_routed > 0)) {
    // The budget: what was asked, what the generation reached, and where τ ended (it started at d.tau).
    const pct = (v) => (100 * v).toFixed(1) + "%";
    rows.splice(4, 0,
      ["routed-share target", (d.target_routed > 0 ? pct(d.target_routed) : "none") +
        (d.max_routed > 0 ? " (cap " + pct(d.max_routed) + ")" : "")],
      ["share reached", d.routed_pct.toFixed(1) + "%"],
      ["final τ", d.tau_last.toFixed(3) + " (started at " + d.tau.toFixed(2) + ")"]);
  }
  rows.push(["ended by", d.stop]);
  table.textContent = "";
  for (const [k, v] of rows) {
    const tr = table.insertRow();
    tr.insertCell().textContent = k;
    const td = tr.insertCell();
    td.textContent = v;
    td.dataset.field = k;
  }
  table.dataset.routed = d.n_routed;
  table.dataset.tokens = d.n_tokens;
  table.dataset.routedPct = d.routed_pct;
}

// ------------------------------------------------------------------ running

function request(mode) {
  const body = {
    prompt: els.prompt.value, mode, tau: Number(els.tau.value), max_tokens: Number(els.maxTokens.value),
  };
  // The budget in % on the page, a share in [0, 1] on the wire (0: off).
  const target = Number(els.targetRouted.value) / 100, cap = Number(els.maxRouted.value) / 100;
  if (mode === "joint" && (target > 0 || cap > 0)) Object.assign(body, { target_routed: target, max_routed: cap });
  if (!info.router) body.policy = els.policy.value;
  if (info.chat_template) body.chat = els.chat.checked;
  return body;
}

function setRunning() {
  const busy = running.length > 0;
  els.start.disabled = busy;
  els.compare.disabled = busy || !info || !info.llm;
  els.stop.disabled = !busy;
  document.body.dataset.state = busy ? "running" : "idle";
  if (busy) els.status.textContent = "generating…";
}

// One generation into an output element; resolves when its stream ends.
async function run(mode, out, profile, chart) {
  const run = { id: null, controller: new AbortController(), stopping: false };
  running.push(run);
  setRunning();
  out.textContent = "";
  const shown = document.createElement("span");
  shown.className = "prompt";
  shown.textContent = els.prompt.value;
  out.appendChild(shown);
  profile.textContent = "";
  delete profile.dataset.routed;
  const scores = [];
  let pending = false, result = null;
  const redraw = () => { pending = false; drawChart(chart, scores, null); };
  if (chart === els.chart) lastChart = { scores, tau: null };
  try {
    const res = await apiFetch("/api/generate", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request(mode)),
      signal: run.controller.signal,
    });
    if (!res.ok) throw new Error(await errorMessage(res));
    for await (const { event, data } of readEvents(res)) {
      if (event === "start") {
        run.id = data.id;
        if (run.stopping) cancel(run);
      } else if (event === "token") {
        out.appendChild(tokenSpan(data));
        scores.push({ score: data.score, source: data.source, tau: data.tau });
        if (chart && !pending) { pending = true; requestAnimationFrame(redraw); }
      } else if (event === "text") {
        out.appendChild(document.createTextNode(data.text));
      } else if (event === "error") {
        showError(data.message);
      } else if (event === "warning") {
        showError(data.message);
      } else if (event === "done") {
        result = data;
        fillProfile(profile, data);
      }
    }
    if (!result && !run.stopping) showError("the stream ended early (server stopped?)");
  } catch (e) {
    if (e.name !== "AbortError") showError(e.message === "Failed to fetch" ? "cannot reach the tokroute server" : e.message);
  } finally {
    if (chart) drawChart(chart, scores, null);
    running = running.filter((r) => r !== run);
    setRunning();
  }
  return result;
}

function cancel(run) {
  run.stopping = true;
  if (run.id === null) return;  // sent as soon as the id arrives
  apiFetch("/api/cancel", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ id: run.id }) }).catch(() => {});
  // The server ends the stream with a "done" event; if it does not within 5 s, drop the connection (which cancels).
  setTimeout(() => run.controller.abort(), 5000);
}

async function start() {
  if (running.length || !info) return;
  showError("");
  els.single.hidden = false;
  els.compareView.hidden = true;
  const r = await run(els.mode.value, els.output, els.profile, els.chart);
  els.status.textContent = r ? (r.stop === "cancelled" ? "stopped" : "done") : "";
}

async function compare() {
  if (running.length || !info || !info.llm) return;
  showError("");
  els.single.hidden = true;
  els.compareView.hidden = false;
  const svgSmall = document.createElementNS(SVG, "svg"), svgJoint = document.createElementNS(SVG, "svg");
  await Promise.all([
    run("small_only", $("out-small"), $("prof-small"), svgSmall),
    run("joint", $("out-joint"), $("prof-joint"), svgJoint),
  ]);
  els.status.textContent = "done";
}

// ------------------------------------------------------------------ set-up

async function init() {
  try {
    const res = await apiFetch("/api/info");
    if (!res.ok) throw new Error(await errorMessage(res));
    info = await res.json();
  } catch (e) {
    showError(e.message === "Failed to fetch" || e.name === "TypeError" ? "cannot reach the tokroute server" : e.message);
    return;
  }
  els.models.textContent = "SLM " + info.slm + (info.llm ? " · LLM " + info.llm : " · no LLM") +
    (info.router ? " · router " + info.router.split("/").pop() : "");
  for (const opt of [...els.mode.options]) if (!info.modes.includes(opt.value)) opt.remove();
  els.mode.value = info.modes[0];
  if (info.router) els.policyLabel.hidden = true;
  for (const p of info.policies) els.policy.add(new Option(p, p));
  els.chatLabel.hidden = !info.chat_template;
  if (info.chat_template) els.chat.checked = true;
  els.tau.value = info.default_tau;
  els.tauValue.textContent = Number(els.tau.value).toFixed(2);
  els.maxTokens.max = info.max_tokens;
  els.maxTokens.value = Math.min(128, info.max_tokens);
  els.targetRouted.value = +(100 * (info.target_routed || 0)).toFixed(2);
  els.maxRouted.value = +(100 * (info.max_routed || 0)).toFixed(2);
  setRunning();
  drawChart(els.chart, [], Number(els.tau.value));
}

els.tau.addEventListener("input", () => {
  els.tauValue.textContent = Number(els.tau.value).toFixed(2);
  // The last run's scores stay; the τ line moves, showing which tokens the new value would route.
  if (!running.length) {
    lastChart.tau = Number(els.tau.value);
    drawChart(els.chart, lastChart.scores, lastChart.tau);
  }
});
window.addEventListener("resize", () => drawChart(els.chart, lastChart.scores, lastChart.tau));
els.form.addEventListener("submit", (e) => { e.preventDefault(); start(); });
els.stop.addEventListener("click", () => running.forEach(cancel));
els.compare.addEventListener("click", compare);
document.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); start(); }
  if (e.key === "Escape") running.forEach(cancel);
});
document.addEventListener("mouseover", onHover);
document.addEventListener("focusin", onHover);
init();
