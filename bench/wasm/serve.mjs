// serve.mjs — a static file server on 127.0.0.1 for the browser benchmark, cross-origin isolated (COOP/COEP, so
// SharedArrayBuffer and wasm threads exist in the page): `mounts` maps a URL prefix to a directory. Files stream
// from disk (GGUFs of hundreds of MB). Used by run.mjs; `node serve.mjs PORT PREFIX=DIR...` serves on its own.
import fs from "node:fs";
import http from "node:http";
import path from "node:path";

const TYPES = { ".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
  ".json": "application/json" };

export function serve(mounts, port = 0) {
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(new URL(req.url, "http://x").pathname);
    const prefix = Object.keys(mounts).sort((a, b) => b.length - a.length).find((p) => url.startsWith(p));
    const root = prefix !== undefined && path.resolve(mounts[prefix]);
    const file = root && path.resolve(root, "." + url.slice(prefix.length - 1));
    const headers = { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
      "Cross-Origin-Resource-Policy": "same-origin", "Cache-Control": "no-store" };
    if (!file || !file.startsWith(root) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      res.writeHead(404, headers).end("not found");
      return;
    }
    const size = fs.statSync(file).size;
    res.writeHead(200, { ...headers, "Content-Type": TYPES[path.extname(file)] || "application/octet-stream",
      "Content-Length": size });
    if (req.method === "HEAD") res.end();
    else fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(port, "127.0.0.1", () => resolve(server)));
}

if (process.argv[1] && import.meta.url.endsWith(path.basename(process.argv[1]))) {
  const mounts = Object.fromEntries(process.argv.slice(3).map((a) => a.split("=")));
  const server = await serve(mounts, Number(process.argv[2] || 0));
  console.log(`http://127.0.0.1:${server.address().port}/`);
}
