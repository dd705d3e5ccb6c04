// page.mjs — one benchmark run in the page (query: engine=tokroute|wllama, model=URL, threads, pp, tg, reps):
// prefill tokens/s of a pp-token prompt and decode tokens/s over tg greedy tokens, best of reps after a warm-up,
// left in window.benchResult ({engine, threads, pp, tg, ...} or {error}). tokroute: bench_wasm.c built by build.sh
// (/build/), the GGUF fetched and written into emscripten's memory file system. wllama: its own loader and
// createCompletion's llama.cpp timings (the prompt is text, so its token count is what the tokenizer makes of it).
const q = new URLSearchParams(location.search);
const threads = Number(q.get("threads") || 1), pp = Number(q.get("pp") || 64), tg = Number(q.get("tg") || 32);
const reps = Number(q.get("reps") || 2), model = q.get("model");
const log = (s) => { document.getElementById("log").textContent += s + "\n"; };

async function runTokroute() {
  const bytes = new Uint8Array(await (await fetch(model)).arrayBuffer());
  const lines = [];
  let done;
  const exited = new Promise((r) => { done = r; });
  await new Promise((resolve, reject) => { // a classic script: emscripten 3.1.6's pthread workers import it so
    const s = Object.assign(document.createElement("script"), { src: "/build/bench_wasm.js", onload: resolve,
      onerror: () => reject(new Error("no /build/bench_wasm.js")) });
    document.head.appendChild(s);
  });
  const mod = await window.TokrouteBench({
    print: (s) => lines.push(s), printErr: (s) => log(s), onExit: (code) => done(code),
    locateFile: (f) => "/build/" + f,
  });
  mod.FS.writeFile("/model.gguf", bytes);
  mod.callMain(["/model.gguf", String(threads), String(pp), String(tg), String(reps)]);
  const code = await exited;
  const line = lines.find((l) => l.startsWith("{"));
  if (code !== 0 || !line) throw new Error(`bench_wasm exited ${code}`);
  return JSON.parse(line);
}

async function runWllama() {
  const { Wllama } = await import("/wllama/esm/index.js");
  const wllama = new Wllama({ default: "/wllama/esm/wasm/wllama.wasm" }, { suppressNativeLog: true });
  await wllama.loadModelFromUrl(model, { n_threads: threads, n_ctx: 2 * (pp + tg) + 64, n_batch: 512 });
  const words = "the cat sat on a mat and then it ran to the big red house by the sea ".split(" ");
  // Text of n words, starting with the repetition's number (a prompt never cached); the warm-up's token count
  // sets n so that later prompts come to about pp tokens.
  const prompt = (r, n) => `${r} ` + Array.from({ length: n }, (_, i) => words[(i * 7 + r) % words.length]).join(" ");
  let n = pp - 1, best = { pp: 0, tg: 0, pp_tokens: 0, tg_tokens: 0 };
  for (let r = -1; r < reps; r++) { // r = -1: warm-up
    const res = await wllama.createCompletion({ prompt: prompt(r + 2, n), max_tokens: tg, temperature: 0,
      ignore_eos: true, cache_prompt: false });
    const t = res.timings;
    if (!t) throw new Error("wllama returned no timings");
    if (r < 0) { n = Math.max(1, Math.round(n * pp / t.prompt_n)); continue; }
    best = { pp: Math.max(best.pp, t.prompt_per_second), tg: Math.max(best.tg, t.predicted_per_second),
      pp_tokens: t.prompt_n, tg_tokens: t.predicted_n };
  }
  const result = { engine: "wllama", threads: wllama.getNumThreads(), multithread: wllama.isMultithread(), ...best };
  await wllama.exit();
  return result;
}

(async () => {
  try {
    if (!crossOriginIsolated) throw new Error("the page is not cross-origin isolated (COOP/COEP)");
    window.benchResult = q.get("engine") === "wllama" ? await runWllama() : await runTokroute();
  } catch (e) {
    window.benchResult = { error: String(e && e.stack || e) };
  }
  log(JSON.stringify(window.benchResult));
})();
