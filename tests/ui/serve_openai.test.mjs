// serve_openai.test.mjs — `tokroute serve` through the official openai SDK (npm openai, pinned in package.json), as
// an app would use it: models.list() names the model /health names; completions and chat completions, streamed and
// not, agree with each other (a chat answer is the completion of its messages rendered in ChatML; streamed pieces
// add up to the whole answer; usage counts match); seeded sampling repeats; chat logprobs come in the SDK's shape;
// a wrong key is an AuthenticationError, bad fields are BadRequestErrors with err.param naming the field; a stream
// the client aborts ends without the server failing (the log line is checked by serve_openai.sh).
// Usage: node serve_openai.test.mjs BASE_URL API_KEY   (serve started with --chat-template chatml)
import assert from "node:assert/strict";
import OpenAI from "openai";

const [base, key] = process.argv.slice(2);
if (!base || !key) {
  console.error("usage: node serve_openai.test.mjs BASE_URL API_KEY");
  process.exit(2);
}
const client = new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 0, timeout: 30_000 });
const deadline = setTimeout(() => {
  console.error("FAIL: the SDK test ran past 120 s");
  process.exit(1);
}, 120_000);

async function expectError(cls, call, param) {
  try {
    await call();
  } catch (err) {
    assert.ok(err instanceof cls, `expected ${cls.name}, got ${err?.constructor?.name}: ${err?.message}`);
    if (param !== undefined) assert.equal(err.param, param, `err.param for ${err.message}`);
    return err;
  }
  assert.fail(`expected ${cls.name}`);
}

// models.list(): the one model, named as /health and every reply name it
const health = await (await fetch(`${base}/health`, { headers: { Authorization: `Bearer ${key}` } })).json();
const models = [];
for await (const m of client.models.list()) models.push(m);
assert.equal(models.length, 1);
assert.equal(models[0].id, health.model);
assert.equal(models[0].object, "model");

// completions, whole and streamed
const prompt = "Once upon a time";
const whole = await client.completions.create({ model: models[0].id, prompt, max_tokens: 8, temperature: 0 });
assert.equal(whole.object, "text_completion");
assert.equal(whole.model, models[0].id);
assert.equal(whole.choices[0].finish_reason, "length");
assert.equal(whole.usage.completion_tokens, 8);
assert.ok(whole.choices[0].text.length > 0);
let streamed = "";
let usage = null;
const cstream = await client.completions.create({
  model: models[0].id, prompt, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true },
});
for await (const chunk of cstream) {
  if (chunk.usage) usage = chunk.usage;
  if (chunk.choices.length) streamed += chunk.choices[0].text;
}
assert.equal(streamed, whole.choices[0].text);
assert.equal(usage?.completion_tokens, 8);
console.log(`completions ok: ${JSON.stringify(whole.choices[0].text)}`);

// chat: the answer is the completion of the messages rendered in ChatML
const messages = [{ role: "user", content: "Tell me a story about a cat." }];
const chat = await client.chat.completions.create({
  model: models[0].id, messages, max_completion_tokens: 10, temperature: 0,
});
assert.equal(chat.object, "chat.completion");
assert.ok(chat.id.startsWith("chatcmpl-"));
assert.equal(chat.choices[0].message.role, "assistant");
assert.equal(chat.choices[0].finish_reason, "length");
assert.equal(chat.usage.completion_tokens, 10);
const rendered = "<|im_start|>user\nTell me a story about a cat.<|im_end|>\n<|im_start|>assistant\n";
const same = await client.completions.create({ model: models[0].id, prompt: rendered, max_tokens: 10, temperature: 0 });
assert.equal(chat.choices[0].message.content, same.choices[0].text);
assert.equal(chat.usage.prompt_tokens, same.usage.prompt_tokens);

let content = "";
let role = null;
let finish = null;
usage = null;
const sstream = await client.chat.completions.create({
  model: models[0].id, messages, max_completion_tokens: 10, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of sstream) {
  assert.equal(chunk.object, "chat.completion.chunk");
  if (chunk.usage) usage = chunk.usage;
  if (!chunk.choices.length) continue;
  const c = chunk.choices[0];
  if (c.delta.role) role = c.delta.role;
  if (c.delta.content) content += c.delta.content;
  if (c.finish_reason) finish = c.finish_reason;
}
assert.equal(role, "assistant");
assert.equal(content, chat.choices[0].message.content);
assert.equal(finish, "length");
assert.deepEqual(usage, chat.usage);
console.log(`chat ok: ${JSON.stringify(content)}`);

// seeded sampling repeats; logprobs in the chat shape
const sampled = [];
for (let i = 0; i < 2; i++) {
  const r = await client.chat.completions.create({
    model: models[0].id, messages, max_tokens: 12, temperature: 1, top_p: 0.9, seed: 7, logprobs: true,
    top_logprobs: 3,
  });
  assert.equal(r.choices[0].logprobs.content.length, r.usage.completion_tokens);
  for (const e of r.choices[0].logprobs.content) {
    assert.equal(typeof e.token, "string");
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[2].logprob);
  }
  sampled.push(r.choices[0].message.content);
}
assert.equal(sampled[0], sampled[1]);

// errors: the SDK's classes, with err.param naming the field
const wrong = new OpenAI({ apiKey: "wrong-key", baseURL: `${base}/v1`, maxRetries: 0 });
await expectError(OpenAI.AuthenticationError, () => wrong.models.list());
await expectError(OpenAI.AuthenticationError, () => wrong.chat.completions.create({ model: "m", messages }));
await expectError(OpenAI.BadRequestError,
  () => client.chat.completions.create({ model: "m", messages, bogus_field: 1 }), "bogus_field");
await expectError(OpenAI.BadRequestError,
  () => client.chat.completions.create({ model: "m", messages, n: 2 }), "n");
await expectError(OpenAI.BadRequestError,
  () => client.chat.completions.create({ model: "m", messages: [{ role: "tool", content: "x" }] }), "messages[0].role");
await expectError(OpenAI.BadRequestError,
  () => client.completions.create({ model: "m", prompt, temperature: 5 }), "temperature");
await expectError(OpenAI.BadRequestError,
  () => client.completions.create({ model: "m", prompt, max_tokens: 100000 }), "max_tokens");
console.log("errors ok");

// a client that aborts a stream mid-way
const aborted = await client.chat.completions.create({
  model: models[0].id, messages, max_tokens: 400, temperature: 0, stream: true,
});
let got = 0;
for await (const chunk of aborted) {
  if (++got === 3) {
    aborted.controller.abort();
    break;
  }
}
assert.equal(got, 3);
// the server still answers
const after = await client.completions.create({ model: models[0].id, prompt, max_tokens: 2 });
assert.equal(after.usage.completion_tokens, 2);
console.log("abort ok");
clearTimeout(deadline);
