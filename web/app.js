// app.js — the page's side: the controls, the worker (worker.js: the model decodes there) and the rendering of
// tokens as they arrive (the LLM's in red, fallbacks marked), with per-token timing and the routed share.
// Stop, threaded (cross-origin isolated): sets the stop flag in the module's shared memory (the worker is inside the
// decode loop and reads no message meanwhile); the run ends at its next token and the worker keeps the model. One
// thread (no SharedArrayBuffer): ends the worker and starts a new one on the same model, which comes back from the
// Blob or the browser's cache. A router file's own τ is used until the slider is moved. window.tokroute exposes the
// last run for tests.
"use strict";
const $ = (id) => document.getElementById(id);
let worker = null;
let model = null;        // {url} or {file}, and the router file: what a restarted worker loads again
let llm = null;          // {url, key, protocol}
let run = null;          // the generation in progress: {tokens, started}
let stopFlag = null;     // threaded: {flags: Int32Array over the module's memory, index} (Atomics), else null
let routerTau = -1;      // the loaded router file's τ, used while the slider has not moved since (-1: none)
let reloading = false;   // the model loads again in a restarted worker: the slider stays as the user left it
const state = (s) => { document.body.dataset.state = s; };
window.tokroute = { last: null, events: [] };

function showError(message) {
  const e = $("error");
  e.textContent = message;
  e.hidden = !message;
}

function startWorker() {
  worker = new Worker("worker.js");
  worker.onmessage = (e) => onWorker(e.data);
  worker.onerror = (e) => { showError("the worker failed: " + e.message); state("idle"); };
}

function send(cmd, extra) { worker.postMessage(Object.assign({ cmd }, extra)); }

function onWorker(m) {
  window.tokroute.events.push(m.type);
  switch (m.type) {
  case "ready":
    $("threads").textContent = m.threaded
      ? "WebAssembly " + m.isa + ", up to " + m.threads + " threads (cross-origin isolated)"
      : "WebAssembly " + m.isa + ", one thread: the page is not cross-origin isolated (serve it with " +
        "COOP/COEP headers, e.g. `make web`, for threads)";
    $("threads").textContent += m.hides
      ? "; the LLM's round trip hidden: the SLM speculates and drafts while a request travels, lookahead"
      : "; the LLM called synchronously: the only thread is the one a request blocks, so nothing decodes meanwhile";
    $("threads").classList.toggle("warn", !m.threaded);
    stopFlag = m.stop ? { flags: new Int32Array(m.stop.memory), index: m.stop.index } : null;
    if (model) loadModel(true);
    break;
  case "progress":
    $("progress").hidden = false;
    $("progress").value = m.total ? m.loaded / m.total : 0;
    $("model-info").textContent = "downloading… " + (m.loaded / 2 ** 20).toFixed(1) + " MiB" +
      (m.total ? " of " + (m.total / 2 ** 20).toFixed(1) : "");
    break;
  case "loaded":
    $("progress").hidden = true;
    $("model-info").textContent = "loaded: " + (m.bytes / 2 ** 20).toFixed(1) + " MiB" +
      (m.cached ? " (from the browser's cache)" : "") + ", " + m.threads + " thread" + (m.threads > 1 ? "s" : "") +
      (m.router ? ", router file (τ " + m.router_tau.toFixed(3) + ")" : "");
    window.tokroute.loads = m.loads;
    if (!reloading) {
      routerTau = m.router ? m.router_tau : -1;
      if (routerTau >= 0) $("tau").value = String(routerTau);
      $("tau-value").textContent = routerTau >= 0 ? routerTau.toFixed(3) + " (the router file's)"
        : Number($("tau").value).toFixed(2);
    }
    $("start").disabled = false;
    state("ready");
    if (llm) send("llm", llm);
    break;
  case "llm":
    $("llm-info").textContent = m.ok ? "connected" : m.warning;
    if (m.warning) showError(m.warning);
    break;
  case "token": onToken(m.token); break;
  case "done": finish(m.stats); break;
  case "error":
    if (m.where === "load") { $("progress").hidden = true; $("model-info").textContent = ""; }
    if (m.where === "llm") $("llm-info").textContent = "not connected";
    showError(m.message);
    if (m.where === "generate") finish(null);
    else state(model && m.where !== "load" ? "ready" : "idle");
    break;
  }
}

function loadModel(again) {
  if (!again) {
    const file = $("model-file").files[0];
    const url = $("model-url").value.trim();
    if (!file && !url) return showError("give the model's URL or pick a GGUF file");
    model = { file: file || null, url: file ? null : new URL(url, location.href).href, router: $("router-file").files[0] || null };
  }
  reloading = !!again;
  showError("");
  $("start").disabled = true;
  state("loading");
  $("model-info").textContent = "loading…";
  send("load", model);
}

function connectLlm() {
  llm = { url: $("llm-url").value.trim(), key: $("llm-key").value, protocol: $("protocol").value,
    timeout_ms: Number($("llm-timeout").value) || 10000 };
  showError("");
  $("llm-info").textContent = "connecting…";
  send("llm", llm);
}

function onToken(t) {
  run.tokens.push(t);
  if (window.tokroute.onToken) window.tokroute.onToken(t); // a test's hook
  const span = document.createElement("span");
  span.className = "tok " + (t.fallback ? "fallback" : t.routed ? "llm" : "slm");
  span.textContent = t.text;
  span.dataset.id = t.id;
  span.title = "id " + t.id + (t.score >= 0 ? ", score " + t.score.toFixed(3) : "") + ", τ " + t.tau.toFixed(3) +
    ", SLM " + t.slm_ms.toFixed(1) + " ms" + (t.routed || t.fallback ? ", LLM " + t.llm_ms.toFixed(1) + " ms" : "") +
    (t.fallback ? " (the LLM did not answer: the SLM's token)" : "");
  $("output").appendChild(span);
  const routed = run.tokens.filter((x) => x.routed).length;
  $("status").textContent = run.tokens.length + " tokens, " + routed + " from the LLM (" +
    (100 * routed / run.tokens.length).toFixed(1) + "%), last " + (t.slm_ms + t.llm_ms).toFixed(1) + " ms";
}

function row(name, value) { return "<tr><td>" + name + "</td><td>" + value + "</td></tr>"; }

function finish(stats) {
  $("stop").disabled = true;
  $("start").disabled = false;
  state("ready");
  if (!run) return;
  window.tokroute.last = { tokens: run.tokens, stats, stopped: !stats || stats.stopped };
  if (!stats) return;
  const pct = stats.n_tokens ? (100 * stats.n_routed / stats.n_tokens).toFixed(1) : "0.0";
  $("profile").innerHTML = row("tokens", stats.n_tokens) + row("routed to the LLM", stats.n_routed + " (" + pct + "%)") +
    row("LLM unavailable (fallback)", stats.n_fallback) + row("τ", stats.tau_mean ? stats.tau_mean.toFixed(3) +
      " mean, " + stats.tau_last.toFixed(3) + " last" : stats.tau.toFixed(3)) +
    row("time to first token", stats.ttft_ms.toFixed(1) + " ms") +
    row("mean time between tokens", stats.mean_tbt_ms.toFixed(1) + " ms") +
    row("SLM / LLM time", stats.slm_ms.toFixed(1) + " / " + stats.llm_ms.toFixed(1) + " ms") +
    row("threads", stats.threads) +
    (stats.llm_calls || stats.n_routed ? row("LLM calls", stats.llm_calls + " (" + stats.llm_blocking + " waited for, " +
      stats.llm_wait_ms.toFixed(1) + " ms); " + stats.lookahead_hits + " routed tokens answered without a call (" +
      stats.draft_hits + " by drafts)") : "") +
    (stats.speculate_depth ? row("speculation", (stats.spec_kept + stats.spec_discarded) + " SLM tokens decoded while " +
      "a request travelled, " + stats.spec_kept + " kept") : "");
  $("status").textContent = (stats.stopped ? "stopped: " : "done: ") + stats.n_tokens + " tokens, " + pct + "% from the LLM";
}

$("tau").addEventListener("input", () => {
  routerTau = -1; // moved: the slider's τ from now on
  $("tau-value").textContent = Number($("tau").value).toFixed(2);
});
$("load").addEventListener("click", () => loadModel(false));
$("connect").addEventListener("click", connectLlm);
$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  if (!model) return showError("load a model first");
  showError("");
  $("output").textContent = "";
  $("profile").textContent = "";
  run = { tokens: [] };
  window.tokroute.last = null;
  $("start").disabled = true;
  $("stop").disabled = false;
  state("generating");
  send("generate", {
    prompt: $("prompt").value, mode: $("mode").value, policy: $("policy").value,
    tau: routerTau >= 0 && !$("policy").value ? -1 : Number($("tau").value), // -1: the router file's own
    target_routed: Number($("target-routed").value) / 100,
    max_routed: Number($("max-routed").value) / 100, n_predict: Number($("max-tokens").value),
    seed: Number($("seed").value), temperature: Number($("temperature").value) || 0,
    top_k: $("top-k").value === "" ? -1 : Number($("top-k").value), top_p: Number($("top-p").value) || 0,
  });
});
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("form").requestSubmit();
});
$("stop").addEventListener("click", () => {
  $("stop").disabled = true;
  if (stopFlag) { // the worker reads the flag at its next token and answers done, stopped
    Atomics.store(stopFlag.flags, stopFlag.index, 1);
    $("status").textContent = "stopping…";
    return;
  }
  worker.terminate();
  finish(null);
  $("status").textContent = "stopped";
  startWorker();
});
startWorker();
