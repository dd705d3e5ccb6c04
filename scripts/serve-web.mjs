// serve-web.mjs — `make web`: serves the browser bundle (build-wasm/web, from `make wasm`) on 127.0.0.1 with the
// headers that make the page cross-origin isolated, so its WebAssembly may use threads (SharedArrayBuffer):
//   Cross-Origin-Opener-Policy: same-origin, Cross-Origin-Embedder-Policy: require-corp
// plus Cross-Origin-Resource-Policy: same-origin on what it serves. GGUF files in --models DIR are served under
// /models/ (a model "from a URL" without a download). Any static server that sends the two headers will do.
// --isolate off leaves the two headers out (the page then runs the one-thread build: how a plain static host serves).
//   node scripts/serve-web.mjs [--dir build-wasm/web] [--models DIR] [--host 127.0.0.1] [--port 8000] [--ready-file F]
//                              [--isolate on|off]
import fs from "node:fs";
import http from "node:http";
import path from "node:path";

const opt = { dir: "build-wasm/web", models: "", host: "127.0.0.1", port: "8000", "ready-file": "", isolate: "on" };
for (let i = 2; i < process.argv.length; i += 2) {
  const k = process.argv[i].replace(/^--/, "");
  if (!(k in opt) || i + 1 >= process.argv.length) {
    console.error("usage: serve-web.mjs [--dir DIR] [--models DIR] [--host H] [--port N] [--ready-file F] [--isolate on|off]");
    process.exit(2);
  }
  opt[k] = process.argv[i + 1];
}
const types = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".wasm": "application/wasm",
  ".css": "text/css", ".svg": "image/svg+xml", ".gguf": "application/octet-stream" };

// The file a URL path names under root, or null (no "..", no directories).
function resolve(root, rel) {
  const p = path.resolve(root, "." + path.posix.normalize("/" + decodeURIComponent(rel)));
  return p.startsWith(path.resolve(root) + path.sep) && fs.existsSync(p) && fs.statSync(p).isFile() ? p : null;
}

const server = http.createServer((req, res) => {
  const headers = opt.isolate === "off" ? { "Cache-Control": "no-cache" } : { "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp", "Cross-Origin-Resource-Policy": "same-origin", "Cache-Control": "no-cache" };
  let url;
  try { url = new URL(req.url, "http://x"); } catch { res.writeHead(400, headers).end(); return; }
  const rel = url.pathname === "/" ? "/index.html" : url.pathname;
  let file = null;
  try {
    file = opt.models && rel.startsWith("/models/") ? resolve(opt.models, rel.slice(7)) : resolve(opt.dir, rel);
  } catch { file = null; }
  if (req.method !== "GET" && req.method !== "HEAD") { res.writeHead(405, headers).end(); return; }
  if (!file) { res.writeHead(404, { ...headers, "Content-Type": "text/plain" }).end("not found\n"); return; }
  const size = fs.statSync(file).size;
  res.writeHead(200, { ...headers, "Content-Type": types[path.extname(file)] || "application/octet-stream",
    "Content-Length": size });
  if (req.method === "HEAD") res.end();
  else fs.createReadStream(file).pipe(res);
});
server.listen(Number(opt.port), opt.host, () => {
  const where = "http://" + opt.host + ":" + server.address().port;
  if (opt["ready-file"]) fs.writeFileSync(opt["ready-file"], where + "\n");
  console.error("tokroute: serving " + opt.dir + " at " + where + "/" +
    (opt.isolate === "off" ? " (not cross-origin isolated: one thread)" : " (cross-origin isolated)"));
});
