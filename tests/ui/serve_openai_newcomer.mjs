// serve_openai_newcomer.mjs — a newcomer's first request to `tokroute serve` with the official openai SDK, written
// as the README's "Server" section shows it: one completion and one chat completion, each printed. Fails when either
// errors, comes back empty or is not in the shape the SDK documents.
// Usage: node serve_openai_newcomer.mjs BASE_URL
import OpenAI from "openai";

const base = process.argv[2];
if (!base) {
  console.error("usage: node serve_openai_newcomer.mjs BASE_URL");
  process.exit(2);
}
const timer = setTimeout(() => {
  console.error("FAIL: no answer in 60 s");
  process.exit(1);
}, 60_000);

const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none" }); // serve started without --api-key
const model = (await client.models.list()).data[0].id;
const completion = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 16 });
const chat = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Tell me a story." }],
  max_tokens: 16,
});
const text = completion.choices[0]?.text;
const answer = chat.choices[0]?.message?.content;
if (!text || !answer || chat.choices[0].message.role !== "assistant" || chat.usage.completion_tokens < 1) {
  console.error("FAIL: unexpected replies", JSON.stringify({ completion, chat }));
  process.exit(1);
}
console.log(`model ${model}\ncompletion: ${JSON.stringify(text)}\nchat: ${JSON.stringify(answer)}`);
clearTimeout(timer);
