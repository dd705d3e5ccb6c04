// web.test.mjs — the browser as the device (make wasm's bundle, docs/web.md) in headless Chromium (Debian's chromium
// driven by playwright-core), the LLM behind a real `tokroute serve --cors '*' --api-key` on 127.0.0.1 and the page
// served cross-origin isolated by scripts/serve-web.mjs. The demo pair's greedy generation in the page equals native
// `tokroute generate --server` token for token (ids, and which were routed) in joint, SLM-only and LLM-only modes,
// with a policy, with a routed-share target, with a trained router (a file picked beside the model's URL; at its own
// τ while the slider is untouched), and through the OpenAI-compatible backend as `generate --openai`; seeded
// sampling (SLM and LLM) as `generate --temp --top-k --top-p --seed`. The threaded page hides the round trip as
// natively (speculation, drafts, lookahead): behind a delaying proxy it counts SLM tokens decoded while requests
// travelled and routed tokens answered without a call; Stop ends a run there without reloading the model. The model
// downloaded from a URL comes back from the browser's cache after a reload; threads are on (cross-origin isolated),
// and served without COOP/COEP the one-thread build runs the synchronous loop and says so. The LLM killed mid-run
// gives flagged fallback tokens and the generation finishes (in the hiding loop); an LLM that never answers times
// out per call; an unreachable LLM, a model URL that is not there, a file that is not a GGUF, one too large for
// wasm32 and a wrong key each give their message, nothing hangs.
// Random-weight SLMs of real shapes (tokroute synth: qwen2.5-0.5b in Q4_0 and Q4_K_M, gemma3-270m) give the native
// engine's 32 greedy ids, or part at a near-tie of the native logits (SIMD128 sums in another order). Screenshots
// go to ARTIFACTS/*.png.
// Usage: node web.test.mjs TOKROUTE SHARED_DIR WEB_DIR ARTIFACTS_DIR
import { spawn, spawnSync } from "node:child_process";
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const [cli, shared, webDir, artifacts] = process.argv.slice(2);
if (!cli || !shared || !webDir || !artifacts) {
  console.error("usage: node web.test.mjs TOKROUTE SHARED_DIR WEB_DIR ARTIFACTS_DIR");
  process.exit(2);
}
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const slm = path.join(shared, "models/stories-student.gguf");
const llm = path.join(shared, "models/stories260K.gguf");
const KEY = "web-test-key";
const PROMPT = "Once upon a time there was a little dog";
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
fs.mkdirSync(artifacts, { recursive: true });
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tokroute-web-"));
const procs = [];
let browser = null;

const deadline = setTimeout(() => {
  console.error("FAIL: the browser test ran past 840 s");
  cleanup().finally(() => process.exit(1));
}, 840_000);

async function cleanup() {
  for (const p of procs) if (p.exitCode === null) p.kill("SIGTERM");
  if (browser) await browser.close().catch(() => {});
  fs.rmSync(tmp, { recursive: true, force: true });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function ok(what) { console.log("ok   " + what); }
let step = 0;
async function shot(page, name) {
  await page.screenshot({ path: path.join(artifacts, String(++step).padStart(2, "0") + "-" + name + ".png"), fullPage: true });
}

async function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

// Starts a process that writes its URL to a ready file; resolves to {url, proc}.
async function start(name, cmd, args) {
  const ready = path.join(tmp, name + ".ready");
  const logFile = path.join(tmp, name + ".log");
  const proc = spawn(cmd, [...args, "--ready-file", ready], { stdio: ["ignore", "ignore", fs.openSync(logFile, "w")] });
  procs.push(proc);
  for (let i = 0; i < 600; i++) {
    if (fs.existsSync(ready) && fs.readFileSync(ready, "utf8").trim())
      return { url: fs.readFileSync(ready, "utf8").trim().split("\n")[0].replace(/\/$/, ""), proc };
    if (proc.exitCode !== null) throw new Error(name + " exited: " + fs.readFileSync(logFile, "utf8"));
    await sleep(50);
  }
  throw new Error(name + " did not start");
}
async function startLlm(name) {
  return start(name, cli, ["serve", "-m", llm, "--host", "127.0.0.1", "--port", String(await freePort()),
    "--cors", "*", "--api-key", KEY]);
}

// Native `tokroute generate --server`: [{id, routed, fallback}] from its trace.
function native(llmUrl, args, protocol = "--server") {
  const trace = path.join(tmp, "trace.jsonl");
  const r = spawnSync(cli, ["generate", "--slm", slm, protocol, llmUrl, "--api-key", KEY, "-p", PROMPT, "--ids",
    "--trace", trace, ...args], { encoding: "utf8", timeout: 60_000 });
  assert.equal(r.status, 0, "native generate " + args.join(" ") + ": " + r.stderr);
  return fs.readFileSync(trace, "utf8").trim().split("\n").map((l) => JSON.parse(l))
    .map((t) => ({ id: t.id, routed: t.source === "llm", fallback: !!t.llm_unavailable, tau: t.tau }));
}

// A slow LLM: an HTTP proxy to target that holds every POST (a next-token call) for delayMs before passing it on,
// so the page's hiding loop has a round trip to hide. Resolves to {url, close}.
async function delayProxy(target, delayMs) {
  const to = new URL(target);
  const srv = http.createServer((req, res) => {
    const body = [];
    req.on("data", (c) => body.push(c));
    req.on("end", () => setTimeout(() => {
      const up = http.request({ host: to.hostname, port: to.port, path: req.url, method: req.method,
        headers: req.headers }, (r) => { res.writeHead(r.statusCode, r.headers); r.pipe(res); });
      up.on("error", () => res.destroy());
      up.end(Buffer.concat(body));
    }, req.method === "POST" ? delayMs : 0));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return { url: "http://127.0.0.1:" + srv.address().port, close: () => srv.close() };
}

// A router for the demo pair, trained as README "Router training" does, on a small slice, storing τ 0.437.
function trainRouter() {
  const run = (args) => {
    const r = spawnSync(cli, args, { encoding: "utf8", timeout: 120_000 });
    assert.equal(r.status, 0, args[0] + ": " + r.stderr);
  };
  run(["collect", "--slm", slm, "--llm", llm, "--data", path.join(shared, "data/tinystories/tinystories_val.txt"),
    "--format", "text", "--range", "0:20", "--max-tokens", "64", "--out", path.join(tmp, "collect"), "-t", "1"]);
  // τ stored in the file: off the slider's 0.01 steps and its 0.5 default, so the page must use the file's own
  run(["train-router", "--data", path.join(tmp, "collect"), "--out", path.join(tmp, "router.gguf"), "--epochs", "3",
    "-t", "1", "--tau", "0.437"]);
  return path.join(tmp, "router.gguf");
}

// The native logit of `want` minus that of `other` after the prompt and `before` (tokroute tokenize + logits).
function nativeLogitGap(model, before, want, other) {
  const t = spawnSync(cli, ["tokenize", "-m", model, "--ids", PROMPT], { encoding: "utf8", timeout: 60_000 });
  assert.equal(t.status, 0, "tokenize: " + t.stderr);
  const seq = [...t.stdout.trim().split(/[\s,]+/).map(Number), ...before];
  const out = path.join(tmp, "logits.f32");
  const l = spawnSync(cli, ["logits", "-m", model, "--tokens", seq.join(","), "--logits", out, "-t", "2"],
    { encoding: "utf8", timeout: 120_000 });
  assert.equal(l.status, 0, "logits: " + l.stderr);
  const all = new Float32Array(fs.readFileSync(out).buffer.slice(0));
  const nVocab = all.length / seq.length;
  const row = all.subarray((seq.length - 1) * nVocab);
  return row[want] - row[other];
}

async function waitFor(page, what, fn, arg, ms = 60_000) {
  await page.waitForFunction(fn, arg, { timeout: ms }).catch((e) => {
    throw new Error(what + ": " + e.message.split("\n")[0]);
  });
}
async function errorText(page) { return (await page.locator("#error").textContent()) || ""; }

// Runs the page with these settings; resolves to window.tokroute.last.
async function generate(page, s, ms = 60_000) {
  await page.locator("#prompt").fill(PROMPT);
  await page.selectOption("#mode", s.mode);
  if (!s.keepTau) await page.locator("#tau").fill(String(s.tau ?? 0.5));
  await page.locator("#temperature").fill(String(s.temp ?? 0));
  await page.locator("#top-k").fill(String(s.top_k ?? 40));
  await page.locator("#top-p").fill(String(s.top_p ?? 0.95));
  await page.locator("#seed").fill(String(s.seed ?? 0));
  await page.selectOption("#policy", s.policy || "");
  await page.locator("#target-routed").fill(String(s.target ?? 0));
  await page.locator("#max-tokens").fill(String(s.n));
  await page.evaluate(() => { window.tokroute.last = null; });
  await page.click("#start");
  await waitFor(page, "generation " + JSON.stringify(s), () => window.tokroute.last !== null, null, ms);
  return page.evaluate(() => window.tokroute.last);
}

async function loadModel(page, how) {
  await page.evaluate(() => { window.tokroute.events = []; });
  if (how.url !== undefined) {
    await page.locator("#model-file").setInputFiles([]);
    await page.locator("#model-url").fill(how.url);
  } else {
    await page.locator("#model-file").setInputFiles(how.file);
  }
  await page.locator("#router-file").setInputFiles(how.router ? [how.router] : []);
  await page.click("#load");
  await waitFor(page, "model load", () => window.tokroute.events.some((e) => e === "loaded" || e === "error"));
  return page.evaluate(() => window.tokroute.events.includes("loaded"));
}

async function connect(page, url, key, protocol = "server") {
  await page.evaluate(() => { window.tokroute.events = []; });
  await page.locator("#llm-url").fill(url);
  await page.locator("#llm-key").fill(key);
  await page.selectOption("#protocol", protocol);
  await page.click("#connect");
  await waitFor(page, "LLM connect", () => window.tokroute.events.some((e) => e === "llm" || e === "error"), null, 30_000);
  return page.locator("#llm-info").textContent();
}

function same(got, want, what) {
  const g = got.tokens.map((t) => [t.id, t.routed, t.fallback]);
  const w = want.map((t) => [t.id, t.routed, t.fallback]);
  assert.deepEqual(g, w, what + ": the page's tokens (id, routed, fallback) differ from native");
}

async function main() {
  const server = await startLlm("llm");
  const web = await start("web", "node", [path.join(root, "scripts/serve-web.mjs"), "--dir", webDir, "--models",
    path.join(shared, "models"), "--port", "0"]);
  browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ["--no-sandbox"] });
  const context = await browser.newContext({ viewport: { width: 1200, height: 1000 } });
  const page = await context.newPage();
  const consoleErrors = [];
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page.goto(web.url + "/");
  await waitFor(page, "worker start", () => window.tokroute.events.includes("ready"));
  assert.match(await page.locator("#threads").textContent(),
    /simd128, up to \d+ threads \(cross-origin isolated\); the LLM's round trip hidden/);
  ok("page cross-origin isolated: " + (await page.locator("#threads").textContent()));

  // Errors first, each a message: a model URL that is not there, a file that is not a GGUF.
  assert.equal(await loadModel(page, { url: "/models/no-such-model.gguf" }), false);
  assert.match(await errorText(page), /cannot download the model .*HTTP 404/);
  ok("a model URL that is not there: " + (await errorText(page)));
  const notGguf = path.join(tmp, "notes.gguf");
  fs.writeFileSync(notGguf, "this is not a model\n".repeat(10));
  assert.equal(await loadModel(page, { file: notGguf }), false);
  assert.match(await errorText(page), /not a GGUF file/);
  ok("a file that is not a GGUF: " + (await errorText(page)));

  // The SLM from a URL, with progress; then the LLM, a wrong key first.
  assert.equal(await loadModel(page, { url: "/models/stories-student.gguf" }), true, await errorText(page));
  assert.match(await page.locator("#model-info").textContent(), /^loaded: [\d.]+ MiB, \d+ threads?/);
  // tokroute serve's /health needs no key: a wrong one is refused at the first routed token, and the run stops
  // with the message, as `tokroute generate` stops.
  await connect(page, server.url, "wrong-key");
  await page.selectOption("#mode", "llm");
  await page.locator("#max-tokens").fill("8");
  await page.click("#start");
  await waitFor(page, "the wrong key's message", () => /refused the API key/.test(document.querySelector("#error").textContent));
  await waitFor(page, "the run ends", () => document.body.dataset.state === "ready");
  assert.match(await errorText(page), /refused the API key \(wrong or missing\).*HTTP 401/);
  ok("a wrong key: " + (await errorText(page)));
  assert.equal(await connect(page, server.url, KEY), "connected");
  ok("model from a URL, LLM connected");

  const n = 48;
  const cases = [
    { mode: "joint", tau: 0.6, args: ["--tau", "0.6"] },
    { mode: "slm", args: ["--mode", "slm"] },
    { mode: "llm", args: ["--mode", "llm"] },
    { mode: "joint", tau: 0.8, policy: "entropy", args: ["--tau", "0.8", "--policy", "entropy"] },
    { mode: "joint", tau: 0.5, target: 30, args: ["--tau", "0.5", "--target-routed", "0.3"] },
  ];
  for (const c of cases) {
    const want = native(server.url, ["-n", String(n), ...c.args]);
    const got = await generate(page, { ...c, n });
    same(got, want, c.mode + (c.policy ? " " + c.policy : "") + (c.target ? " target" : ""));
    const routed = want.filter((t) => t.routed).length;
    if (c.mode === "joint") assert.ok(routed > 0 && routed < want.length, "joint routes some, not all: " + routed);
    if (c.mode === "llm") assert.equal(routed, want.length);
    if (c.mode === "slm") assert.equal(routed, 0);
    assert.equal(await page.locator("#output .tok.llm").count(), routed, "red tokens = routed");
    ok(c.args.join(" ") + ": " + want.length + " tokens equal native, " + routed + " routed");
  }
  await shot(page, "joint");

  // Seeded sampling as `tokroute generate --temp --top-k --top-p --seed`: the SLM draws from (seed, position), the
  // LLM (tokroute serve) from (seed + 1, position), in joint mode and LLM only.
  const greedy = native(server.url, ["-n", "32", "--tau", "0.6"]);
  for (const c of [{ mode: "joint", tau: 0.6, temp: 0.9, top_k: 40, top_p: 0.9, seed: 7,
    args: ["--tau", "0.6", "--temp", "0.9", "--top-k", "40", "--top-p", "0.9", "--seed", "7"] },
  { mode: "llm", temp: 1.2, top_k: 0, top_p: 1, seed: 11,
    args: ["--mode", "llm", "--temp", "1.2", "--top-k", "0", "--top-p", "1", "--seed", "11"] }]) {
    const want = native(server.url, ["-n", "32", ...c.args]);
    const got = await generate(page, { ...c, n: 32 });
    same(got, want, "sampled " + c.args.join(" "));
    assert.notDeepEqual(want.map((t) => t.id), greedy.map((t) => t.id), "sampling changed the tokens");
    assert.equal(got.stats.seed, c.seed);
    ok(c.args.join(" ") + ": 32 sampled tokens equal native, " + want.filter((t) => t.routed).length + " routed");
  }

  // Hiding the round trip (threaded page), counted: behind a proxy that holds each call 150 ms, the SLM decodes
  // while requests travel and routed tokens are answered by earlier replies (lookahead, drafts) without a call —
  // none of which the synchronous loop does — and the tokens are still native's.
  const slow = await delayProxy(server.url, 150);
  assert.equal(await connect(page, slow.url, KEY), "connected");
  const wantH = native(server.url, ["-n", String(n), "--tau", "0.6"]);
  const gotH = await generate(page, { mode: "joint", tau: 0.6, n });
  same(gotH, wantH, "hiding behind a slow LLM");
  const h = gotH.stats;
  assert.deepEqual([h.speculate_depth, h.lookahead, h.draft], [8, 8, 96], "generate --server's hiding defaults");
  assert.ok(h.spec_kept + h.spec_discarded > 0, "SLM tokens decoded while a request travelled: " + JSON.stringify(h));
  assert.ok(h.lookahead_hits > 0 && h.llm_calls < h.n_routed, "routed tokens without a call: " + JSON.stringify(h));
  assert.equal(h.llm_calls + h.lookahead_hits, h.n_routed, "every routed token a call or an earlier reply's");
  assert.match(await page.locator("#profile").textContent(), /SLM tokens decoded while a request travelled/);
  ok("hiding (LLM 150 ms slower): " + h.n_routed + " routed tokens in " + h.llm_calls + " calls (" + h.lookahead_hits +
    " from earlier replies, " + h.draft_hits + " by drafts), " + (h.spec_kept + h.spec_discarded) +
    " SLM tokens decoded while requests travelled; equal native");

  // Stop mid-run (threaded: the flag in shared memory): the run ends, the worker and its model stay (no new worker,
  // no model load), and the next generation runs at once and equals native.
  const loadsBefore = await page.evaluate(() => window.tokroute.loads);
  await page.evaluate(() => {
    window.tokroute.events = [];
    window.tokroute.onToken = (t) => { if (t.index === 5) document.getElementById("stop").click(); };
  });
  const stopped = await generate(page, { mode: "joint", tau: 1, n: 300 });
  await page.evaluate(() => { window.tokroute.onToken = null; });
  assert.ok(stopped.stopped && stopped.stats && stopped.stats.stopped, "a stopped run: " + JSON.stringify(stopped.stats));
  assert.ok(stopped.tokens.length >= 6 && stopped.tokens.length < 300, "stopped after token 5: " + stopped.tokens.length);
  assert.match(await page.locator("#status").textContent(), /^stopped: /);
  slow.close();
  assert.equal(await connect(page, server.url, KEY), "connected");
  same(await generate(page, { mode: "joint", tau: 0.6, n }), native(server.url, ["-n", String(n), "--tau", "0.6"]),
    "after Stop");
  const events = await page.evaluate(() => window.tokroute.events);
  assert.ok(!events.includes("ready") && !events.includes("loaded"), "no new worker, no model load: " + events);
  assert.equal(await page.evaluate(() => window.tokroute.loads), loadsBefore, "the model loaded no more times");
  ok("Stop at token 5 of 300: " + stopped.tokens.length + " tokens, the worker and the model kept (" + loadsBefore +
    " loads before and after); the next run equals native");

  // A trained router (collect + train-router on 20 stories, about a second), picked as a file beside the model URL.
  const router = trainRouter();
  assert.equal(await loadModel(page, { url: "/models/stories-student.gguf", router }), true, await errorText(page));
  const info = await page.locator("#model-info").textContent();
  assert.match(info, /router file \(τ [\d.]+\)/);
  // The router file's own τ while the slider has not moved (the page shows it), as `generate --router` without --tau.
  const wantT = native(server.url, ["-n", String(n), "--router", router]);
  const routerTau = wantT[0].tau;
  assert.ok(Math.abs(routerTau - 0.5) > 0.005, "the trained router's τ differs from the slider's default: " + routerTau);
  assert.match(await page.locator("#tau-value").textContent(), new RegExp("^" + routerTau.toFixed(3) + " \\(the router"));
  const gotT = await generate(page, { mode: "joint", keepTau: true, n });
  same(gotT, wantT, "the router file's τ");
  assert.ok(Math.abs(gotT.stats.tau - routerTau) < 1e-5, "τ used " + gotT.stats.tau + ", the router's " + routerTau);
  ok("--router (its own τ " + routerTau + ", shown, slider untouched): " + n + " tokens equal native, " +
    wantT.filter((t) => t.routed).length + " routed");
  const wantR = native(server.url, ["-n", String(n), "--router", router, "--tau", "0.5"]);
  const gotR = await generate(page, { mode: "joint", tau: 0.5, n });
  same(gotR, wantR, "trained router");
  const routedR = wantR.filter((t) => t.routed).length;
  assert.ok(routedR > 0 && routedR < n, "the router routes some, not all: " + routedR);
  ok("--router (trained) --tau 0.5: " + n + " tokens equal native, " + routedR + " routed");

  // Every thread at once (the page's most, 4, asked for here as this machine reports fewer cores): 3 kernel workers,
  // 3 for the router file's MLP and the backend's helper must all be in emscripten's pthread pool, else a thread
  // created with the pool empty never starts while the worker blocks (a hang).
  await page.evaluate(() => { window.tokroute.events = []; send("load", Object.assign({}, model, { threads: 4 })); });
  await waitFor(page, "the load at 4 threads", () => window.tokroute.events.some((e) => e === "loaded" || e === "error"));
  assert.match(await page.locator("#model-info").textContent(), /, 4 threads, router file/, await errorText(page));
  const want4 = native(server.url, ["-n", String(n), "--router", router, "--tau", "0.5", "-t", "4"]);
  const got4 = await generate(page, { mode: "joint", tau: 0.5, n });
  same(got4, want4, "4 threads, a router file, the hiding loop");
  assert.ok(got4.stats.threads === 4 && got4.stats.speculate_depth === 8, JSON.stringify(got4.stats));
  ok("4 threads with a router file and the hiding loop (7 pthreads): " + n + " tokens equal native -t 4");

  // The OpenAI-compatible backend (tokroute serve's /v1/completions), as `tokroute generate --openai`.
  assert.equal(await connect(page, server.url, KEY, "openai"), "connected");
  const wantO = native(server.url, ["-n", String(n), "--tau", "0.6"], "--openai");
  // (policy named: the router file loaded above would otherwise score, as --router would natively)
  same(await generate(page, { mode: "joint", tau: 0.6, policy: "maxprob", n }), wantO, "openai protocol");
  ok("--openai --tau 0.6: " + n + " tokens equal native, " + wantO.filter((t) => t.routed).length + " routed");
  assert.equal(await connect(page, server.url, KEY), "connected");

  // A model too large for wasm32's memory: refused by its size before anything is read (a sparse 4.5 GiB file).
  const huge = path.join(tmp, "huge.gguf");
  fs.writeFileSync(huge, "GGUF");
  fs.truncateSync(huge, 4.5 * 2 ** 30);
  assert.equal(await loadModel(page, { file: huge }), false);
  assert.match(await errorText(page), /too large for WebAssembly's 32-bit memory/);
  ok("a model too large: " + (await errorText(page)));
  fs.rmSync(huge);

  // A reload finds the model in the browser's cache.
  await page.reload();
  await waitFor(page, "worker start", () => window.tokroute.events.includes("ready"));
  assert.equal(await loadModel(page, { url: "/models/stories-student.gguf" }), true, await errorText(page));
  assert.match(await page.locator("#model-info").textContent(), /from the browser's cache/);
  ok("after a reload the model comes from the browser's cache");

  // An unreachable LLM: the message, then routed tokens are the SLM's, flagged.
  const closed = await freePort();
  assert.match(await connect(page, "http://127.0.0.1:" + closed, KEY), /does not answer/);
  assert.match(await errorText(page), /does not answer/);
  let last = await generate(page, { mode: "joint", tau: 0.6, n: 16 });
  assert.equal(last.tokens.length, 16);
  assert.ok(last.tokens.some((t) => t.fallback) && !last.tokens.some((t) => t.routed), "fallbacks, nothing routed");
  assert.equal(last.stats.n_fallback, last.tokens.filter((t) => t.fallback).length);
  ok("an unreachable LLM: message, then " + last.stats.n_fallback + " flagged fallback tokens");

  // An LLM that accepts connections and never answers: each call ends at its timeout (xhr.timeout from the call's
  // deadline), the message says so, and routed tokens are the SLM's, flagged; nothing hangs.
  const silent = net.createServer(() => {}).listen(0, "127.0.0.1");
  await new Promise((r) => silent.once("listening", r));
  await page.locator("#llm-timeout").fill("800");
  const t0 = Date.now();
  assert.match(await connect(page, "http://127.0.0.1:" + silent.address().port, KEY), /does not answer/);
  assert.match(await errorText(page), /timed out|timeout/);
  const connectMs = Date.now() - t0;
  last = await generate(page, { mode: "joint", tau: 0.6, n: 16 });
  assert.equal(last.tokens.length, 16);
  assert.ok(last.tokens.some((t) => t.fallback) && !last.tokens.some((t) => t.routed), "fallbacks, nothing routed");
  assert.ok(last.stats.total_ms < 15_000, "the timeouts bound the run: " + last.stats.total_ms + " ms");
  ok("an LLM that never answers: connect gave up in " + connectMs + " ms (timeout 800), then " + last.stats.n_fallback +
    " flagged fallbacks in " + last.stats.total_ms.toFixed(0) + " ms");
  silent.close();
  await page.locator("#llm-timeout").fill("10000");

  // The LLM killed mid-run: what came before is the LLM's, then flagged fallbacks, and the generation finishes.
  const doomed = await startLlm("doomed");
  assert.equal(await connect(page, doomed.url, KEY), "connected");
  await page.exposeFunction("killLlm", () => doomed.proc.kill("SIGKILL"));
  await page.evaluate(() => { window.tokroute.onToken = (t) => { if (t.index === 3) window.killLlm(); }; });
  last = await generate(page, { mode: "joint", tau: 1, n: 300 });
  await page.evaluate(() => { window.tokroute.onToken = null; });
  assert.notEqual(last.stats, null, "the generation finished");
  assert.equal(last.stats.speculate_depth, 8, "the hiding loop ran");
  assert.equal(last.tokens.length, 300);
  assert.ok(last.tokens.slice(0, 4).some((t) => t.routed), "routed to the LLM before it was killed");
  const firstFallback = last.tokens.findIndex((t) => t.fallback);
  assert.ok(firstFallback > 3, "fallback tokens after the kill: first at " + firstFallback);
  assert.ok(!last.tokens.slice(firstFallback).some((t) => t.routed), "no LLM token after the first fallback");
  assert.equal(last.stats.n_fallback, last.tokens.filter((t) => t.fallback).length);
  assert.ok(await page.locator("#output .tok.fallback").count() > 0, "fallbacks marked in the page");
  ok("the LLM killed at token 3: " + last.stats.n_routed + " routed, then " + last.stats.n_fallback +
    " flagged fallbacks from token " + firstFallback + "; all 300 tokens");
  await shot(page, "fallback");

  // Served without COOP/COEP (a plain static host): the one-thread build runs, the page says so, same tokens.
  const plain = await start("plain", "node", [path.join(root, "scripts/serve-web.mjs"), "--dir", webDir, "--models",
    path.join(shared, "models"), "--port", "0", "--isolate", "off"]);
  const page1 = await context.newPage();
  page1.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page1.goto(plain.url + "/");
  await waitFor(page1, "worker start", () => window.tokroute.events.includes("ready"));
  assert.match(await page1.locator("#threads").textContent(),
    /one thread: the page is not cross-origin isolated.*the LLM called synchronously/);
  assert.equal(await loadModel(page1, { url: "/models/stories-student.gguf" }), true, await errorText(page1));
  assert.equal(await connect(page1, server.url, KEY), "connected");
  const want1 = native(server.url, ["-n", "32", "--tau", "0.6", "-t", "1"]);
  const got1 = await generate(page1, { mode: "joint", tau: 0.6, n: 32 });
  same(got1, want1, "one thread");
  const s1 = got1.stats;
  assert.ok(s1.speculate_depth === 0 && s1.lookahead === 0 && s1.llm_calls === s1.n_routed, "the synchronous loop");
  ok("not cross-origin isolated: one thread and the synchronous loop, said in the page; 32 tokens equal native");

  // Random-weight SLMs of real shapes (tokroute synth), picked as files: 32 greedy ids as the native engine's
  // (SIMD128 sums in another order than AVX2/AVX-512: check-portable measures the logits within 0.06).
  for (const [shape, type] of [["qwen2.5-0.5b", "q4_0"], ["qwen2.5-0.5b", "q4_k_m"], ["gemma3-270m", "q8_0"]]) {
    const file = path.join(tmp, shape + "-" + type + ".gguf");
    const r = spawnSync(cli, ["synth", "--shape", shape, "--type", type, "-o", file], { encoding: "utf8", timeout: 120_000 });
    assert.equal(r.status, 0, "synth: " + r.stderr);
    const g = spawnSync(cli, ["generate", "-m", file, "-p", PROMPT, "-n", "32", "--ids", "-t", "2"],
      { encoding: "utf8", timeout: 120_000 });
    assert.equal(g.status, 0, "native generate: " + g.stderr);
    const want = g.stdout.trim().split(/\s+/).map(Number);
    assert.equal(await loadModel(page, { file }), true, await errorText(page));
    const got = await generate(page, { mode: "slm", n: 32 }, 300_000); // ~0.4 s a token on 2 loaded cores
    const ids = got.tokens.map((t) => t.id);
    const p = ids.findIndex((id, i) => id !== want[i]);
    const speed = " (" + got.stats.mean_tbt_ms.toFixed(1) + " ms/token in the page)";
    if (p < 0 && ids.length === want.length) {
      ok("synth " + shape + " " + type + ": 32 greedy ids equal native" + speed);
    } else {
      // Where they part, the native logits of the two choices must be a near-tie: SIMD128 sums in another order.
      const gap = nativeLogitGap(file, want.slice(0, p), want[p], ids[p]);
      assert.ok(p >= 0 && gap <= 0.15, shape + " " + type + ": ids part at " + p + " where native's logits differ by " +
        gap + " (0.15 allowed): " + ids.join(",") + " vs native " + want.join(","));
      ok("synth " + shape + " " + type + ": greedy ids equal native up to token " + p + ", where the two picks' native " +
        "logits differ by " + gap.toFixed(4) + " (a near-tie; 0.15 allowed)" + speed);
    }
    fs.rmSync(file);
  }
  assert.deepEqual(consoleErrors, [], "no page errors");
}

main().then(async () => { clearTimeout(deadline); await cleanup(); console.log("PASS"); },
  async (e) => { console.error("FAIL: " + (e.stack || e)); clearTimeout(deadline); await cleanup(); process.exit(1); });
