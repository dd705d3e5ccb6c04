// openai.test.mjs — the device's OpenAI-compatible API (`tokroute ui`, /v1) driven by the official `openai` SDK as
// an app would: models.list() names the model; completions and chat completions, streamed and not; a greedy
// completion's text equals `tokroute generate`'s with the same prompt, router settings and token count, and its
// usage.routed_tokens equals the routed count generate reports (also when streamed with include_usage); a wrong
// key, a bad field and a full queue raise AuthenticationError, BadRequestError and RateLimitError; a client that
// aborts its stream cancels its generation on the server.
//
// usage: node openai.test.mjs BASE_URL KEY EXPECTED_JSON  (run by tests/e2e/ui_openai.sh, which starts the server
// with --max-queue 1 and writes EXPECTED_JSON from generate: {prompt, threshold, n, text, n_routed, model}).
import assert from "node:assert/strict";
import fs from "node:fs";
import OpenAI from "openai";

const [base, key, expectedFile] = process.argv.slice(2);
if (!expectedFile) {
  console.error("usage: node openai.test.mjs BASE_URL KEY EXPECTED_JSON");
  process.exit(2);
}
const want = JSON.parse(fs.readFileSync(expectedFile, "utf8"));
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0, timeout: 60_000 });
const ok = (what) => console.log("ok   " + what);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function status() {
  const res = await fetch(base + "/api/status", { headers: { Authorization: "Bearer " + key } });
  return res.json();
}
async function waitFor(pred, what) {
  for (let i = 0; i < 300; i++) {
    if (pred(await status())) return;
    await sleep(20);
  }
  throw new Error("timed out waiting for " + what);
}

const timer = setTimeout(() => { console.error("FAIL: ran past 240 s"); process.exit(1); }, 240_000);
try {
  // ---------------------------------------------------------------- models
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0].id, want.model);
  assert.equal(models[0].object, "model");
  ok("models.list() names " + models[0].id);

  // ---------------------------------------------------------------- completions: generate's text and routed count
  const routing = { threshold: want.threshold, policy: "maxprob", mode: "joint" };
  const c = await client.completions.create({
    model: want.model, prompt: want.prompt, max_tokens: want.n, temperature: 0, ...routing,
  });
  assert.equal(c.object, "text_completion");
  assert.equal(c.model, want.model);
  assert.equal(c.choices[0].text, want.text);
  assert.equal(c.usage.routed_tokens, want.n_routed);
  assert.ok(want.n_routed > 0, "the comparison routes some tokens");
  assert.equal(c.usage.completion_tokens, want.n);
  assert.ok(c.usage.llm_calls >= c.usage.routed_tokens && c.usage.llm_wait_ms >= 0, JSON.stringify(c.usage));
  ok(`completion = tokroute generate (${want.n} tokens, ${c.usage.routed_tokens} routed)`);

  let text = "", usage = null, chunks = 0, finish = null;
  const cs = await client.completions.create({
    model: want.model, prompt: want.prompt, max_tokens: want.n, temperature: 0, stream: true,
    stream_options: { include_usage: true }, ...routing,
  });
  for await (const ch of cs) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    for (const choice of ch.choices) {
      text += choice.text;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(text, want.text);
  assert.equal(finish, "length");
  assert.ok(chunks > 2);
  assert.equal(usage.routed_tokens, want.n_routed);
  ok(`streamed completion = the same text in ${chunks} chunks, usage chunk with routed_tokens`);

  // ---------------------------------------------------------------- chat (--chat-template chatml)
  const messages = [{ role: "system", content: "You tell short stories." }, { role: "user", content: "Tell me about a cat." }];
  const chat = await client.chat.completions.create({
    model: want.model, messages, max_completion_tokens: 24, temperature: 0, logprobs: true, ...routing,
  });
  assert.equal(chat.object, "chat.completion");
  assert.equal(chat.choices[0].message.role, "assistant");
  const content = chat.choices[0].message.content;
  assert.ok(typeof content === "string" && content.length > 0);
  assert.ok(chat.usage.prompt_tokens > 10 && chat.usage.completion_tokens <= 24);
  assert.ok(chat.choices[0].logprobs.content.length > 0);
  assert.ok(chat.choices[0].logprobs.content.every((t) => t.logprob === null || t.logprob <= 0));
  let streamed = "", role = null;
  const chatStream = await client.chat.completions.create({
    model: want.model, messages, max_completion_tokens: 24, temperature: 0, stream: true, ...routing,
  });
  for await (const ch of chatStream) {
    assert.equal(ch.object, "chat.completion.chunk");
    const d = ch.choices[0]?.delta ?? {};
    if (d.role) role = d.role;
    streamed += d.content ?? "";
  }
  assert.equal(role, "assistant");
  assert.equal(streamed, content);
  ok("chat completion, streamed and not, the same greedy text: " + JSON.stringify(content.slice(0, 40)));

  // ---------------------------------------------------------------- errors as the SDK's classes
  const wrong = new OpenAI({ baseURL: base + "/v1", apiKey: "not-the-key", maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(
    client.completions.create({ model: want.model, prompt: "a", frequency_penalty: 0.5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "frequency_penalty" && e.type === "invalid_request_error" &&
      e.code === "unsupported_field");
  await assert.rejects(
    client.completions.create({ model: want.model, prompt: "a", frequencypenalty: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "frequencypenalty" && e.code === "unknown_field");
  await assert.rejects(
    client.chat.completions.create({ model: want.model, messages, temperature: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "temperature");
  ok("wrong key → AuthenticationError, bad fields → BadRequestError (param, type, code filled)");

  // ---------------------------------------------------------------- a full queue, then a client that aborts
  // The server runs one generation, one waits (--max-queue 1): a third is refused. The running one is slow:
  // every token comes from the LLM behind a simulated 10 ms round trip.
  const controller = new AbortController();
  const long = await client.completions.create(
    { model: want.model, prompt: want.prompt, max_tokens: 400, mode: "llm", stream: true },
    { signal: controller.signal });
  const iter = long[Symbol.asyncIterator]();
  await iter.next(); // it runs
  const waiting = client.completions.create({ model: want.model, prompt: "Once", max_tokens: 2, mode: "slm" });
  await waitFor((s) => s.waiting === 1, "a waiting request");
  await assert.rejects(
    client.completions.create({ model: want.model, prompt: "Once", max_tokens: 2 }),
    (e) => e instanceof OpenAI.RateLimitError && e.status === 429 && Number(e.headers.get("retry-after")) >= 1);
  ok("a full queue → RateLimitError with Retry-After");
  const t0 = Date.now();
  controller.abort();
  const w = await waiting; // runs once the aborted one has been cancelled
  assert.equal(w.usage.completion_tokens, 2);
  await waitFor((s) => s.active === 0, "the server to be idle");
  assert.ok(Date.now() - t0 < 3000, "the aborted generation (4 s more) was cancelled: " + (Date.now() - t0) + " ms");
  ok(`aborting a stream cancels its generation (the waiting request answered after ${Date.now() - t0} ms)`);
  clearTimeout(timer);
  process.exit(0); // not kept waiting by a socket the aborted fetch may leave open (nodejs/undici#5845)
} catch (e) {
  clearTimeout(timer);
  console.error("FAIL: " + (e.stack || e));
  process.exit(1);
}
