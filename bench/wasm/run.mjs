// run.mjs — drives the browser benchmark: serves page.html cross-origin isolated on 127.0.0.1 (serve.mjs), opens it
// in headless Chromium (Debian's, through playwright-core as tests/ui does) once per engine × model × thread
// count, each in a fresh page, and prints one JSON line per run. Usage:
//   node run.mjs --build DIR --wllama DIR --models A.gguf,B.gguf --threads 1,2 [--pp 64] [--tg 32] [--reps 2]
//     [--engines tokroute,wllama]
// NODE_PATH must reach playwright-core (tests/ui/node_modules).
import path from "node:path";
import { createRequire } from "node:module";
import { serve } from "./serve.mjs";

const require = createRequire(import.meta.url);
const { chromium } = require("playwright-core");
const arg = (name, def) => { const i = process.argv.indexOf("--" + name); return i > 0 ? process.argv[i + 1] : def; };
const models = arg("models", "").split(",").filter(Boolean);
const mounts = { "/": path.dirname(new URL(import.meta.url).pathname), "/build/": arg("build"),
  "/wllama/": arg("wllama") };
models.forEach((m, i) => { mounts[`/m${i}/`] = path.dirname(path.resolve(m)); });
const server = await serve(mounts);
const base = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true,
  args: ["--no-sandbox", "--enable-features=SharedArrayBuffer"] });
const timeoutMs = Number(arg("timeout", 600)) * 1000;
let failed = 0;
try {
  for (const [i, m] of models.entries())
    for (const engine of arg("engines", "tokroute,wllama").split(","))
      for (const threads of arg("threads", "1,2").split(",")) {
        const page = await browser.newPage();
        const q = new URLSearchParams({ engine, threads, model: `/m${i}/${path.basename(m)}`, pp: arg("pp", 64),
          tg: arg("tg", 32), reps: arg("reps", 2) });
        await page.goto(`${base}/page.html?${q}`);
        await page.waitForFunction(() => window.benchResult, null, { timeout: timeoutMs, polling: 500 });
        const r = { model: path.basename(m), engine, threads_asked: Number(threads),
          ...(await page.evaluate(() => window.benchResult)) };
        if (r.error) failed++;
        console.log(JSON.stringify(r));
        await page.close();
      }
} finally {
  await browser.close();
  server.close();
}
process.exit(failed ? 1 : 0);
