// llama_tokenize_check.mjs — ties a fixture's reference ids to llama.cpp's llama-tokenize program: runs it on every
// EVERY-th text of an .inp file (texts each followed by "\n__ggml_vocab_test__\n") and checks that it prints the ids of
// that text's line in the .out file (one line per text, each id preceded by a space). Exits 1 on a difference.
//
//   node llama_tokenize_check.mjs LLAMA_TOKENIZE VOCAB.gguf IN.inp REF.out EVERY [--no-parse-special]
//
// Texts go through a file, read verbatim (--no-escape), with no BOS (--no-bos); parse_special is llama-tokenize's
// default (on) unless --no-parse-special is given. Two processes at a time.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [bin, vocab, inp, ref, everyArg, flag] = process.argv.slice(2);
const every = Number(everyArg);
if (!bin || !vocab || !inp || !ref || !(every >= 1) || (flag && flag !== '--no-parse-special')) {
  console.error('usage: node llama_tokenize_check.mjs LLAMA_TOKENIZE VOCAB.gguf IN.inp REF.out EVERY [--no-parse-special]');
  process.exit(2);
}
const sep = Buffer.from('\n__ggml_vocab_test__\n');
const data = fs.readFileSync(inp);
const texts = [];
for (let off = 0; off < data.length;) {
  const m = data.indexOf(sep, off);
  const end = m < 0 ? data.length : m;
  texts.push(data.subarray(off, end));
  off = m < 0 ? data.length : end + sep.length;
}
const want = fs.readFileSync(ref, 'utf8').split('\n');
if (want.length !== texts.length + 1) {
  console.error(`${ref}: ${want.length - 1} lines for ${texts.length} texts`);
  process.exit(1);
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tokcheck-'));
let bad = 0;

function run(i) {
  return new Promise((resolve, reject) => {
    const file = path.join(tmp, `${i}.txt`);
    fs.writeFileSync(file, texts[i]);
    const args = ['-m', vocab, '-f', file, '--ids', '--no-bos', '--no-escape', '--log-disable'];
    if (flag) args.push(flag);
    const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let so = '', se = '';
    p.stdout.on('data', (d) => (so += d));
    p.stderr.on('data', (d) => (se += d));
    p.on('close', (code) => {
      const m = so.match(/^\[([0-9, ]*)\]\s*$/m);
      if (code !== 0 || !m) return reject(new Error(`llama-tokenize failed on text ${i} (exit ${code}): ${se.slice(-400)}`));
      const got = m[1].trim() === '' ? '' : m[1].split(',').map((s) => ' ' + s.trim()).join('');
      if (got !== want[i]) {
        bad++;
        console.error(`${path.basename(ref)}: text ${i}: llama-tokenize gives${got}\n  the fixture has${want[i]}`);
      }
      resolve();
    });
  });
}

const picked = texts.map((_, i) => i).filter((i) => i % every === 0);
let next = 0;
async function worker() {
  while (next < picked.length) await run(picked[next++]);
}
try {
  await Promise.all([worker(), worker()]);
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
process.exit(bad ? 1 : 0);
