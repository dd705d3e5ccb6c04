// ui.test.mjs — `tokroute ui` in headless Chromium (Debian's chromium driven by playwright-core), as a user uses it:
// type a prompt; small_only shows no red tokens and routes 0; joint at a high τ shows red tokens whose count is the
// routed count and % in the profiling panel; moving the slider shows its value and the next run routes more; hover
// shows a token's score, τ and the SLM's proposal; the chart's τ line is each token's τ (flat at a fixed τ, moving
// under a routed-share target); the target and cap controls reach /api/generate, the share stays near the target
// and under the cap, the panel shows target, share reached and final τ, and a cap below the target is refused by
// name; Stop ends the stream and leaves the server idle; closing a tab
// cancels its generation; two tabs generate at once; compare; bad input shows a message; phone width and dark mode
// stay readable; with a dead LLM server the message shows and the tokens still come from the SLM. Screenshots go
// to ARTIFACTS/*.png.
// Usage: node ui.test.mjs TOKROUTE SHARED_DIR ARTIFACTS_DIR
import { spawn } from "node:child_process";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const [cli, shared, artifacts] = process.argv.slice(2);
if (!cli || !shared || !artifacts) {
  console.error("usage: node ui.test.mjs TOKROUTE SHARED_DIR ARTIFACTS_DIR");
  process.exit(2);
}
const slm = path.join(shared, "models/stories-student.gguf");
const llm = path.join(shared, "models/stories260K.gguf");
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
fs.mkdirSync(artifacts, { recursive: true });
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tokroute-ui-"));
const servers = [];
let browser = null;

// The whole test is bounded: whatever hangs, everything is stopped and the test fails.
const deadline = setTimeout(() => {
  console.error("FAIL: the browser test ran past 240 s");
  cleanup().finally(() => process.exit(1));
}, 240_000);

async function cleanup() {
  for (const s of servers) if (s.exitCode === null) s.kill("SIGTERM");
  if (browser) await browser.close().catch(() => {});
  fs.rmSync(tmp, { recursive: true, force: true });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts `tokroute ui` on a free port; resolves to its base URL.
async function startServer(name, args) {
  const ready = path.join(tmp, name + ".ready");
  const log = fs.openSync(path.join(tmp, name + ".log"), "w");
  const proc = spawn(cli, ["ui", "--slm", slm, "--port", "0", "--ready-file", ready, ...args],
    { stdio: ["ignore", "ignore", log] });
  servers.push(proc);
  proc.logFile = path.join(tmp, name + ".log");
  for (let i = 0; i < 600; i++) {
    if (fs.existsSync(ready) && fs.readFileSync(ready, "utf8").trim()) return { url: fs.readFileSync(ready, "utf8").trim() + "/", proc };
    if (proc.exitCode !== null) throw new Error(name + " server exited: " + fs.readFileSync(proc.logFile, "utf8"));
    await sleep(50);
  }
  throw new Error(name + " server did not start");
}

async function active(url) {
  const r = await fetch(url + "api/status");
  return (await r.json()).active;
}
async function waitIdleServer(url, what) {
  for (let i = 0; i < 200; i++) {
    if ((await active(url)) === 0) return;
    await sleep(50);
  }
  throw new Error(what + ": the server still runs a generation");
}

let step = 0;
async function shot(page, name) {
  step++;
  const file = path.join(artifacts, String(step).padStart(2, "0") + "-" + name + ".png");
  await page.screenshot({ path: file, fullPage: true });
}
function ok(what) { console.log("ok   " + what); }

// Runs the page's current settings and waits until it is idle again.
async function runAndWait(page, how = "click") {
  if (how === "keys") await page.locator("#prompt").press("Control+Enter");
  else await page.click("#start");
  await page.waitForSelector("body[data-state=running]", { timeout: 10_000 }).catch(() => {});
  await page.waitForSelector("body[data-state=idle]", { timeout: 60_000 });
}
async function counts(page, out = "#output", prof = "#profile") {
  return page.evaluate(([o, p]) => ({
    llm: document.querySelectorAll(o + " .tok.llm").length,
    fallback: document.querySelectorAll(o + " .tok.fallback").length,
    tokens: document.querySelectorAll(o + " .tok").length,
    routed: Number(document.querySelector(p).dataset.routed),
    total: Number(document.querySelector(p).dataset.tokens),
    pct: Number(document.querySelector(p).dataset.routedPct),
    pctText: [...document.querySelectorAll(p + " td")].find((td) => td.dataset.field === "routed to the LLM")?.textContent,
  }), [out, prof]);
}
async function setTau(page, value) {
  await page.locator("#tau").fill(String(value));
  const shown = await page.locator("#tau-value").textContent();
  assert.equal(shown, Number(value).toFixed(2), "the slider's shown value");
}

async function main() {
  // Every routed token waits 10 ms (a simulated round trip, each waited for: --sync), so a long run is slow enough
  // to stop.
  const { url } = await startServer("main", ["--llm", llm, "--simulate-rtt", "10", "--sync", "--max-generations", "2"]);
  browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ["--no-sandbox"] });
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 }, colorScheme: "light" });
  const page = await context.newPage();
  const consoleErrors = [];
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });

  await page.goto(url);
  await page.waitForSelector("body[data-state=idle]");
  assert.match(await page.locator("#models").textContent(), /stories-student\.gguf.*stories260K\.gguf/);
  assert.equal(await page.locator("#policy-label").isVisible(), true, "policy select without a router file");
  assert.equal(await page.locator("#chat-label").isVisible(), false, "no chat toggle: the SLM has no template");
  await page.locator("#prompt").fill("Once upon a time there was a little dog");
  await page.locator("#max-tokens").fill("60");
  ok("page loads with the models' names");

  // small_only: nothing red, routed 0.
  await page.selectOption("#mode", "small_only");
  await runAndWait(page);
  let c = await counts(page);
  assert.equal(c.tokens, 60);
  assert.equal(c.llm, 0, "small_only shows no red tokens");
  assert.equal(c.routed, 0);
  assert.match(c.pctText, /^0 \(0\.0%\)$/);
  await shot(page, "small-only");
  ok("small_only: 60 tokens, none red, routed 0");

  // joint at a high tau, started with Ctrl+Enter: red tokens, their count is the routed count.
  await page.selectOption("#mode", "joint");
  await setTau(page, 0.9);
  await runAndWait(page, "keys");
  c = await counts(page);
  assert.ok(c.llm > 0, "joint at tau 0.9 shows red tokens");
  assert.equal(c.routed, c.llm, "routed count = red tokens");
  assert.equal(c.total, c.tokens);
  assert.ok(Math.abs(c.pct - (100 * c.llm) / c.tokens) < 0.01, "routed % = red / tokens");
  assert.equal(c.pctText, `${c.llm} (${((100 * c.llm) / c.tokens).toFixed(1)}%)`);
  const color = await page.locator("#output .tok.llm").first().evaluate((e) => getComputedStyle(e).color);
  assert.match(color, /^rgb\((2\d\d), (\d+), (\d+)\)$/, "LLM tokens are red");
  const [r, g] = color.match(/\d+/g).map(Number);
  assert.ok(r > 150 && g < 80, "LLM tokens are red: " + color);
  const dots = await page.locator("#chart circle.routed").count();
  assert.equal(dots, c.llm, "one red dot per routed token on the chart");
  assert.equal(await page.locator("#chart polyline.tau").count(), 1, "the chart has the tau line");
  const fixedTaus = (await page.locator("#chart polyline.tau").getAttribute("data-taus")).split(" ").map(Number);
  assert.equal(fixedTaus.length, c.tokens, "one τ step per token");
  assert.ok(fixedTaus.every((t) => t === 0.9), "without a target every token's τ is the slider's");
  assert.equal(await page.locator('#profile td[data-field="final τ"]').count(), 0, "no budget rows without one");
  const pts = (await page.locator("#chart polyline.score").getAttribute("points")).trim().split(/\s+/);
  assert.equal(pts.length, c.tokens, "one chart point per token");
  // Hover an LLM token: its score, tau and the SLM's proposal.
  await page.locator("#output .tok.llm").first().hover();
  const tip = await page.locator("#tip").textContent();
  assert.ok(await page.locator("#tip").isVisible(), "tooltip visible");
  assert.match(tip, /from the LLM/);
  assert.match(tip, /router score 0\.\d{3}\s+τ 0\.90/);
  assert.match(tip, /SLM proposed "/);
  await shot(page, "joint-tau-0.90-hover");
  ok(`joint at tau 0.90: ${c.llm} red tokens = routed ${c.routed} (${c.pct}%); chart and tooltip agree`);

  // Moving the slider up routes more.
  await setTau(page, 0.6);
  await runAndWait(page);
  const low = await counts(page);
  await setTau(page, 0.97);
  await runAndWait(page);
  const high = await counts(page);
  assert.ok(high.routed > low.routed, `tau 0.97 routes more than 0.60 (${high.routed} vs ${low.routed})`);
  assert.equal(high.routed, high.llm);
  ok(`slider: tau 0.60 routes ${low.routed}, tau 0.97 routes ${high.routed}`);

  // The budget: a 10% target from τ 0.9 (which alone routes far more) under a 15% cap. The request carries both;
  // τ moves per token on the chart; the share ends near 10% (the controller keeps |routed − P·n| <= 2.5) and never
  // above ⌈0.15·n⌉; the panel shows the target, the share reached and the final τ.
  await setTau(page, 0.9);
  await page.locator("#target-routed").fill("10");
  await page.locator("#max-routed").fill("15");
  const sent = page.waitForRequest((q) => q.url().endsWith("/api/generate"));
  await runAndWait(page);
  const body = JSON.parse((await sent).postData());
  assert.equal(body.target_routed, 0.1);
  assert.equal(body.max_routed, 0.15);
  c = await counts(page);
  assert.equal(c.tokens, 60);
  assert.ok(Math.abs(c.routed - 6) <= 2.5, `10% of 60 tokens: routed ${c.routed}`);
  assert.ok(c.routed <= 9, "the cap: at most ⌈0.15 · 60⌉ = 9");
  const taus = (await page.locator("#chart polyline.tau").getAttribute("data-taus")).split(" ").map(Number);
  assert.equal(taus.length, 60, "one τ step per token");
  assert.ok(new Set(taus).size > 1, "τ moves under the target: " + taus.join(" "));
  const field = (name) => page.locator(`#profile td[data-field="${name}"]`).textContent();
  assert.equal(await field("routed-share target"), "10.0% (cap 15.0%)");
  assert.equal(await field("share reached"), c.pct.toFixed(1) + "%");
  assert.equal(await field("final τ"), taus[59].toFixed(3) + " (started at 0.90)");
  await shot(page, "budget-target-10-cap-15");
  // A cap below the target is refused by name, as the OpenAI endpoint and the command line refuse it.
  await page.locator("#target-routed").fill("20");
  await page.locator("#max-routed").fill("10");
  await page.click("#start");
  await page.waitForSelector("#error:not([hidden])", { timeout: 10_000 });
  assert.match(await page.locator("#error").textContent(), /'max_routed' \(0\.1\) is below 'target_routed' \(0\.2\)/);
  await page.locator("#target-routed").fill("0");
  await page.locator("#max-routed").fill("0");
  ok(`budget: target 10%, cap 15% routed ${c.routed} of 60, τ ${taus[0]} → ${taus[59]}; a cap below the target refused`);

  // Stop mid-stream: every token routed (tau 1) with the delay takes seconds; Stop ends it and the server idles.
  await setTau(page, 1);
  await page.locator("#max-tokens").fill("500");
  await page.click("#start");
  await page.waitForFunction(() => document.querySelectorAll("#output .tok").length >= 10, null, { timeout: 20_000 });
  assert.equal(await active(url), 1, "the server generates while the page streams");
  await page.click("#stop");
  await page.waitForSelector("body[data-state=idle]", { timeout: 6_000 });
  await waitIdleServer(url, "Stop");
  c = await counts(page);
  assert.ok(c.tokens < 500, "stopped before the end: " + c.tokens);
  assert.equal(await page.locator("#status").textContent(), "stopped");
  assert.equal(await page.locator('#profile td[data-field="ended by"]').textContent(), "cancelled");
  const afterStop = c.tokens;
  await sleep(300);
  assert.equal((await counts(page)).tokens, afterStop, "no tokens after Stop");
  await shot(page, "stopped");
  ok(`Stop after ${afterStop} tokens: the stream ended, the server is idle`);

  // Two tabs at once; then closing a tab cancels its generation.
  const page2 = await context.newPage();
  await page2.goto(url);
  await page2.waitForSelector("body[data-state=idle]");
  for (const p of [page, page2]) {
    await p.locator("#prompt").fill("Once upon a time there was a little dog");
    await p.selectOption("#mode", "joint");
    await setTau(p, 1);  // every token routed: about 1.5 s each with the delay
    await p.locator("#max-tokens").fill("120");
  }
  await Promise.all([page.click("#start"), page2.click("#start")]);
  let both = 0;
  for (let i = 0; i < 100 && both < 2; i++) { both = Math.max(both, await active(url)); await sleep(20); }
  assert.equal(both, 2, "two tabs generate at the same time");
  await Promise.all([page.waitForSelector("body[data-state=idle]"), page2.waitForSelector("body[data-state=idle]")]);
  assert.equal(await page.locator("#output").textContent(), await page2.locator("#output").textContent());
  await setTau(page2, 1);
  await page2.locator("#max-tokens").fill("500");
  await page2.click("#start");
  await page2.waitForFunction(() => document.querySelectorAll("#output .tok").length >= 5, null, { timeout: 20_000 });
  await page2.close();
  await waitIdleServer(url, "closing the tab");
  ok("two tabs generate at once; closing a tab cancels its generation");

  // Compare: small_only and joint side by side.
  await page.locator("#prompt").fill("Once upon a time there was a little dog");
  await setTau(page, 0.9);
  await page.locator("#max-tokens").fill("60");
  await page.click("#compare");
  await page.waitForSelector("body[data-state=idle]", { timeout: 60_000 });
  const small = await counts(page, "#out-small", "#prof-small");
  const joint = await counts(page, "#out-joint", "#prof-joint");
  assert.equal(small.llm, 0);
  assert.equal(small.routed, 0);
  assert.ok(joint.llm > 0 && joint.routed === joint.llm);
  await shot(page, "compare");
  ok(`compare: small_only routes 0, joint routes ${joint.routed}`);

  // Bad input (context full) shows a message.
  await page.locator("#max-tokens").fill("1000");
  await page.click("#start");
  await page.waitForSelector("#error:not([hidden])", { timeout: 10_000 });
  assert.match(await page.locator("#error").textContent(), /context full/);
  await shot(page, "error-context-full");
  await page.locator("#max-tokens").fill("60");
  ok("context full shows a message");

  // Phone width: nothing wider than the screen; dark mode follows the system.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.click("#start");
  await page.waitForSelector("body[data-state=idle]");
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, "no horizontal scrolling at 390 px: " + overflow);
  await shot(page, "phone");
  const lightBg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.emulateMedia({ colorScheme: "dark" });
  const darkBg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.notEqual(lightBg, darkBg, "dark mode changes the background");
  await page.setViewportSize({ width: 1200, height: 900 });
  await shot(page, "dark");
  ok("phone width fits; dark mode follows the system");
  assert.deepEqual(consoleErrors.filter((e) => !/status of 400/.test(e)), [], "no errors in the page's console");

  await deadLlm();
}

// A dead LLM server: the page says so, and the tokens still come from the SLM (marked as fallbacks).
async function deadLlm() {
  if (process.env.TR_UI_NO_REMOTE === "1") { console.log("note: remote backends not in this build"); return; }
  // A port where nothing listens: bind one, note it, close it.
  const net = await import("node:net");
  const port = await new Promise((res) => { const s = net.createServer(); s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => res(p)); }); });
  const { url } = await startServer("dead", ["--server", `http://127.0.0.1:${port}`, "--timeout-ms", "500", "--retries", "0"]);
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  await page.goto(url);
  await page.waitForSelector("body[data-state=idle]");
  await page.locator("#prompt").fill("Once upon a time");
  await page.selectOption("#mode", "joint");
  await setTau(page, 0.9);
  await page.locator("#max-tokens").fill("40");
  await runAndWait(page);
  const c = await counts(page);
  assert.ok(await page.locator("#error").isVisible(), "an LLM-unavailable message shows");
  assert.match(await page.locator("#error").textContent(), /LLM/i);
  assert.equal(c.tokens, 40, "the SLM still produced every token");
  assert.equal(c.llm, 0, "no token from the dead LLM");
  assert.ok(c.fallback > 0, "routed tokens are marked as fallbacks");
  await page.locator("#output .tok.fallback").first().hover();
  assert.match(await page.locator("#tip").textContent(), /LLM unavailable/);
  await shot(page, "dead-llm");
  await page.close();
  ok(`dead LLM: message shown, ${c.tokens} tokens from the SLM, ${c.fallback} marked as fallbacks`);
}

try {
  await main();
  await cleanup();
  for (const s of servers) if (s.exitCode === null) await new Promise((r) => s.once("exit", r));
  // tokroute ui handles SIGTERM and exits 0; a sanitizer report (leak, UB abort) shows as another status or signal.
  const bad = servers.filter((s) => s.exitCode !== 0);
  assert.equal(bad.length, 0, "servers exit 0 on SIGTERM: " + bad.map((s) => s.exitCode ?? s.signalCode).join(", "));
  clearTimeout(deadline);
  console.log("ok   all browser checks; screenshots in " + artifacts);
} catch (e) {
  console.error("FAIL: " + (e.stack || e));
  for (const s of servers) {
    try { console.error("server log:\n" + fs.readFileSync(s.logFile, "utf8")); } catch (_) { /* gone */ }
  }
  await cleanup();
  clearTimeout(deadline);
  process.exit(1);
}
