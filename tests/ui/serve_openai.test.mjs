// serve_openai.test.mjs — `tokroute serve` through the official openai SDK (npm openai, pinned in package.json), as
// an app would use it: models.list() names the model /health names; completions and chat completions, streamed and
// not, agree with each other (a chat answer is the completion of its messages rendered in ChatML; streamed pieces
// add up to the whole answer; usage counts match); seeded sampling repeats and unseeded does not; stop strings end
// the text before them (whole and streamed, completions and chat); logit_bias forces and bans ids; suffix and the
// penalties are refused by name; chat logprobs come in the SDK's shape; a wrong key is an AuthenticationError, bad fields are BadRequestErrors with err.param naming the field; a stream
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
assert.equal(usage.prompt_tokens, chat.usage.prompt_tokens);
assert.equal(usage.completion_tokens, chat.usage.completion_tokens);
// the same messages again: the prompt came from the prefix cache, all but its last token (OpenAI's cached_tokens)
assert.equal(usage.prompt_tokens_details.cached_tokens, chat.usage.prompt_tokens - 1);
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

// unseeded sampling draws a fresh seed per request: two temperature-1 answers differ
const unseeded = [];
for (let i = 0; i < 2; i++) {
  const r = await client.completions.create({ model: models[0].id, prompt, max_tokens: 24, temperature: 1 });
  unseeded.push(r.choices[0].token_ids.join(","));
}
assert.notEqual(unseeded[0], unseeded[1]);

// stop: the text ends before the first stop string, which no chunk carries, whole and streamed
const long = await client.completions.create({ model: models[0].id, prompt, max_tokens: 40, temperature: 0 });
const text = long.choices[0].text;
const word = text.slice(text.indexOf(" ", 8), text.indexOf(" ", 8) + 4);
assert.ok(word.length === 4 && text.indexOf(word) > 0, `a stop string from ${JSON.stringify(text)}`);
const cut = text.slice(0, text.indexOf(word));
const stopped = await client.completions.create({
  model: models[0].id, prompt, max_tokens: 40, temperature: 0, stop: ["zzqx", word],
});
assert.equal(stopped.choices[0].text, cut);
assert.equal(stopped.choices[0].finish_reason, "stop");
let piecesText = "";
let stopFinish = null;
for await (const chunk of await client.completions.create({
  model: models[0].id, prompt, max_tokens: 40, temperature: 0, stop: word, stream: true,
})) {
  piecesText += chunk.choices[0].text;
  if (chunk.choices[0].finish_reason) stopFinish = chunk.choices[0].finish_reason;
}
assert.equal(piecesText, cut); // no chunk carried any of the stop string
assert.equal(stopFinish, "stop");
const chatLong = await client.chat.completions.create({ model: models[0].id, messages, max_tokens: 30, temperature: 0 });
const chatText = chatLong.choices[0].message.content;
const chatWord = chatText.slice(chatText.indexOf(" ", 4), chatText.indexOf(" ", 4) + 3);
const chatStopped = await client.chat.completions.create({
  model: models[0].id, messages, max_tokens: 30, temperature: 0, stop: [chatWord],
});
assert.equal(chatStopped.choices[0].message.content, chatText.slice(0, chatText.indexOf(chatWord)));
assert.equal(chatStopped.choices[0].finish_reason, "stop");
console.log(`stop ok: ${JSON.stringify(cut)} (stop ${JSON.stringify(word)})`);

// logit_bias: +100 forces an id, -100 bans the greedy one; ids outside the vocabulary are refused
const forced = await client.completions.create({
  model: models[0].id, prompt, max_tokens: 4, temperature: 0, logit_bias: { "300": 100 },
});
assert.deepEqual(forced.choices[0].token_ids, [300, 300, 300, 300]);
const banned = await client.chat.completions.create({
  model: models[0].id, messages, max_tokens: 1, temperature: 0, logit_bias: { [String(chat.choices[0].token_ids[0])]: -100 },
});
assert.notEqual(banned.choices[0].token_ids[0], chat.choices[0].token_ids[0]);
await expectError(OpenAI.BadRequestError,
  () => client.completions.create({ model: "m", prompt, logit_bias: { "100000": 5 } }), "logit_bias");
await expectError(OpenAI.BadRequestError,
  () => client.completions.create({ model: "m", prompt, logit_bias: { "5": 150 } }), "logit_bias");
console.log("logit_bias ok");

// OpenAI fields not implemented are refused by name, never ignored
await expectError(OpenAI.BadRequestError, () => client.completions.create({ model: "m", prompt, suffix: "end" }),
  "suffix");
await expectError(OpenAI.BadRequestError,
  () => client.completions.create({ model: "m", prompt, presence_penalty: 0.5 }), "presence_penalty");
await expectError(OpenAI.BadRequestError,
  () => client.chat.completions.create({ model: "m", messages, frequency_penalty: 1 }), "frequency_penalty");
await expectError(OpenAI.BadRequestError,
  () => client.completions.create({ model: "m", prompt, stop: ["a", "b", "c", "d", "e"] }), "stop");

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
