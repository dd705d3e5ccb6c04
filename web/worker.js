// worker.js — the device: the WebAssembly build of tokroute's core (tokroute.js with threads when the page is
// cross-origin isolated, tokroute-st.js with one thread otherwise) runs here, off the page's thread, so decoding
// never freezes the page and the LLM's requests may be synchronous (src/transport/http_fetch.c). Downloads the
// model with progress into Cache Storage (a reload reads it back) or takes a picked file, mounts it read-only
// (WORKERFS: read from the Blob as the model loads it, no second copy in JavaScript) and relays app.js's commands
// to the C bridge (src/wasm/bridge.c). Messages out: {type: ready|progress|loaded|llm|token|done|error, ...}.
// Threaded, the ready message carries the stop flag: the module's memory (a SharedArrayBuffer) and the flag's index
// in it, which the page sets with Atomics.store to stop a generation this worker is busy with (it cannot read a
// message meanwhile); loaded counts the model loads of this worker (a test sees that Stop keeps the model).
"use strict";
const threaded = self.crossOriginIsolated === true && typeof SharedArrayBuffer !== "undefined";
importScripts(threaded ? "tokroute.js" : "tokroute-st.js");
const CACHE = "tokroute-models";
// wasm32 addresses 4 GiB; the weights are read into it, with the KV cache and work buffers beside them.
const MAX_MODEL_BYTES = 4 * 2 ** 30 - 320 * 2 ** 20;
let M = null;
let mounted = false;
let loads = 0;
const post = (m) => self.postMessage(m);
const gib = (n) => (n / 2 ** 30).toFixed(2) + " GiB";

const ready = createTokroute({
  locateFile: (p) => p,
  mainScriptUrlOrBlob: threaded ? "tokroute.js" : "tokroute-st.js",
  print: (s) => console.log(s),
  printErr: (s) => console.warn(s),
}).then((m) => {
  M = m;
  post({ type: "ready", threaded, isa: M.UTF8ToString(M._tb_isa()), hides: M._tb_hides_round_trip() === 1,
    threads: threaded ? Math.max(1, Math.min(4, (self.navigator.hardwareConcurrency || 1))) : 1,
    stop: threaded ? { memory: M.HEAP32.buffer, index: M._tb_stop_flag() >> 2 } : null });
}, (e) => post({ type: "error", where: "start", message: "the WebAssembly module did not start: " + e }));

// The model's bytes as a Blob: from Cache Storage, else downloaded (progress reported) and stored there.
async function modelFromUrl(url) {
  let cache = null;
  try { cache = await caches.open(CACHE); } catch (e) { /* no Cache Storage (e.g. private mode): download each time */ }
  const hit = cache && (await cache.match(url));
  if (hit) return { blob: await hit.blob(), cached: true };
  let resp;
  try { resp = await fetch(url); } catch (e) {
    throw new Error("cannot download the model from " + url + " (unreachable, or no CORS header on another origin)");
  }
  if (!resp.ok) throw new Error("cannot download the model from " + url + ": HTTP " + resp.status);
  const total = Number(resp.headers.get("Content-Length")) || 0;
  if (total > MAX_MODEL_BYTES) throw new Error(tooLarge(total));
  const reader = resp.body.getReader();
  const parts = [];
  let loaded = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    loaded += value.length;
    if (loaded > MAX_MODEL_BYTES) throw new Error(tooLarge(loaded));
    post({ type: "progress", loaded, total });
  }
  const blob = new Blob(parts);
  if (cache) await cache.put(url, new Response(blob, { headers: { "Content-Length": String(blob.size) } })).catch(() => {});
  return { blob, cached: false };
}

function tooLarge(n) {
  return "the model (" + gib(n) + ") is too large for WebAssembly's 32-bit memory (at most " + gib(MAX_MODEL_BYTES) +
    " of weights: wasm32 addresses 4 GiB)";
}

function mount(files) {
  if (mounted) M.FS.unmount("/in");
  else M.FS.mkdir("/in");
  M.FS.mount(M.WORKERFS || M.FS.filesystems.WORKERFS, { blobs: files }, "/in");
  mounted = true;
}

async function load(msg) {
  await ready;
  const { blob, cached } = msg.file ? { blob: msg.file, cached: false } : await modelFromUrl(msg.url);
  if (blob.size > MAX_MODEL_BYTES) throw new Error(tooLarge(blob.size));
  const head = new Uint8Array(await blob.slice(0, 4).arrayBuffer());
  if (String.fromCharCode(...head) !== "GGUF")
    throw new Error("not a GGUF file: " + (msg.file ? msg.file.name : msg.url) + " does not start with the GGUF magic");
  const files = [{ name: "model.gguf", data: blob }];
  if (msg.router) files.push({ name: "router.gguf", data: msg.router });
  M._tb_unload();
  mount(files);
  const threads = threaded ? Math.max(1, Math.min(4, self.navigator.hardwareConcurrency || 1)) : 1;
  const rc = M.ccall("tb_load", "number", ["string", "string", "number", "number"],
    ["/in/model.gguf", msg.router ? "/in/router.gguf" : "", msg.threads || threads, msg.n_ctx || 0]);
  if (rc !== 0) {
    const m = M.UTF8ToString(M._tb_message());
    throw new Error(/out of memory/i.test(m) ? tooLarge(blob.size) + ": " + m : m);
  }
  loads++;
  post({ type: "loaded", bytes: blob.size, cached, threads: M._tb_n_threads(), router: !!msg.router,
    router_tau: M._tb_router_tau(), loads });
}

function connect(msg) {
  const rc = M.ccall("tb_set_llm", "number", ["string", "string", "string", "number"],
    [msg.url || "", msg.key || "", msg.protocol || "server", msg.timeout_ms || 0]);
  const message = M.UTF8ToString(M._tb_message());
  if (rc > 1) throw new Error(message);
  post({ type: "llm", ok: rc === 0, warning: rc === 1 ? message : "" });
}

function generate(p) {
  self.tokrouteOnToken = (t) => post({ type: "token", token: t });
  const rc = M.ccall("tb_generate", "number",
    ["string", "string", "number", "string", "number", "number", "number", "number", "number", "number", "number"],
    [p.prompt, p.mode, p.tau, p.policy || "", p.target_routed || 0, p.max_routed || 0, p.n_predict, p.seed || 0,
      p.temperature || 0, p.top_k ?? -1, p.top_p || 0]);
  const message = M.UTF8ToString(M._tb_message());
  if (rc !== 0) throw new Error(message);
  post({ type: "done", stats: JSON.parse(message) });
}

self.onmessage = async (e) => {
  const msg = e.data;
  try {
    await ready;
    if (!M) throw new Error("the WebAssembly module did not start");
    if (msg.cmd === "load") await load(msg);
    else if (msg.cmd === "llm") connect(msg);
    else if (msg.cmd === "generate") generate(msg);
  } catch (err) {
    post({ type: "error", where: msg.cmd, message: String(err && err.message ? err.message : err) });
  }
};
