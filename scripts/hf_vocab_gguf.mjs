// hf_vocab_gguf.mjs — writes a vocab-only GGUF (tokenizer.ggml.* metadata, no tensors) from a Hugging Face
// tokenizer.json + tokenizer_config.json, the way llama.cpp's convert_hf_to_gguf.py writes them. Test fixtures only
// (scripts/vocab_fixtures.sh runs it); plain Node, no packages.
//
//   node hf_vocab_gguf.mjs spm DIR OUT.gguf N_VOCAB       SentencePiece ("llama"), as Gemma3Model.set_vocab with a
//                                                         tokenizer.model: _set_vocab_sentencepiece, no space prefix,
//                                                         general.architecture gemma3 (27B's or 1B's shape by N_VOCAB)
//   node hf_vocab_gguf.mjs bpe DIR OUT.gguf N_VOCAB PRE   byte-level BPE ("gpt2"), as _set_vocab_gpt2, with
//                                                         tokenizer.ggml.pre = PRE
//
// SentencePiece: tokenizer.json carries no tokenizer.model scores, only BPE merges. The merges of a SentencePiece BPE
// model converted to tokenizer.json are ordered by the merged piece's id (checked below: a merge that ranks later never
// makes a lower id), so score = -id orders llama.cpp's highest-score-first merging exactly as the merge ranks do.
// Token types follow _create_vocab_sentencepiece: <0xNN> byte, <unk> unknown, the rest normal; then every entry of
// tokenizer_config.json's added_tokens_decoder becomes control (special, or looking special: <unused..>, <mask>,
// <|..|>) or user-defined (with "▁" written as " "), score -1000; ids past the pieces up to N_VOCAB are [PADn].
import fs from 'node:fs';
import path from 'node:path';

const T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER_DEFINED = 4, T_UNUSED = 5, T_BYTE = 6;
const G_UINT32 = 4, G_INT32 = 5, G_FLOAT32 = 6, G_BOOL = 7, G_STRING = 8, G_ARRAY = 9;

function looksSpecial(t) { // convert_hf_to_gguf.py does_token_look_special
  return ['<pad>', '<mask>', '<2mass>', '[@BOS@]'].includes(t) || (t.startsWith('<|') && t.endsWith('|>')) ||
         (t.startsWith('<｜') && t.endsWith('｜>')) || (t.startsWith('<unused') && t.endsWith('>'));
}

class Writer {
  constructor() { this.kv = []; }
  str(key, v) { this.kv.push([key, G_STRING, v]); }
  u32(key, v) { this.kv.push([key, G_UINT32, v]); }
  f32(key, v) { this.kv.push([key, G_FLOAT32, v]); }
  bool(key, v) { this.kv.push([key, G_BOOL, v]); }
  arr(key, type, v) { this.kv.push([key, G_ARRAY, [type, v]]); }
  bytes() {
    const parts = [];
    const u32 = (x) => { const b = Buffer.alloc(4); b.writeUInt32LE(x); parts.push(b); };
    const u64 = (x) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(x)); parts.push(b); };
    const s = (x) => { const b = Buffer.from(x, 'utf8'); u64(b.length); parts.push(b); };
    const val = (type, v) => {
      switch (type) {
      case G_STRING: s(v); break;
      case G_UINT32: u32(v); break;
      case G_INT32: { const b = Buffer.alloc(4); b.writeInt32LE(v); parts.push(b); break; }
      case G_FLOAT32: { const b = Buffer.alloc(4); b.writeFloatLE(v); parts.push(b); break; }
      case G_BOOL: parts.push(Buffer.from([v ? 1 : 0])); break;
      default: throw new Error('type ' + type);
      }
    };
    parts.push(Buffer.from('GGUF'));
    u32(3);
    u64(0); // tensors
    u64(this.kv.length);
    for (const [key, type, v] of this.kv) {
      s(key);
      u32(type);
      if (type === G_ARRAY) {
        u32(v[0]);
        u64(v[1].length);
        for (const x of v[1]) val(v[0], x);
      } else {
        val(type, v);
      }
    }
    const out = Buffer.concat(parts);
    const pad = (32 - (out.length % 32)) % 32; // general.alignment: the (empty) data section starts aligned
    return Buffer.concat([out, Buffer.alloc(pad)]);
  }
}

function load(dir) {
  const tok = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  return { tok, cfg };
}

function idOf(tok, text) {
  if (text == null) return undefined;
  if (typeof text === 'object') text = text.content;
  const a = tok.added_tokens.find((x) => x.content === text);
  return a ? a.id : tok.model.vocab[text];
}

// SpecialVocab: ids of the tokenizer_config.json *_token entries, add_bos/add_eos, the chat template.
function special(w, tok, cfg, nVocab) {
  for (const [typ, key] of [['bos', 'bos_token_id'], ['eos', 'eos_token_id'], ['unk', 'unknown_token_id'],
                            ['pad', 'padding_token_id']]) {
    const id = idOf(tok, cfg[typ + '_token']);
    if (id !== undefined && id < nVocab) w.u32('tokenizer.ggml.' + key, id);
  }
  for (const typ of ['bos', 'eos']) {
    if (typeof cfg['add_' + typ + '_token'] === 'boolean') w.bool(`tokenizer.ggml.add_${typ}_token`, cfg['add_' + typ + '_token']);
  }
  if (typeof cfg.chat_template === 'string') w.str('tokenizer.chat_template', cfg.chat_template);
}

function spm(dir, nVocab, arch) {
  const { tok, cfg } = load(dir);
  const tokens = [], scores = [], types = [];
  for (let i = 0; i < nVocab; i++) tokens.push(`[PAD${i}]`), scores.push(-10000), types.push(T_UNUSED);
  const vocab = tok.model.vocab;
  const addedIds = new Set(tok.added_tokens.map((x) => x.id));
  let maxMergedId = -1;
  for (const m of tok.model.merges) { // the order argument of the header comment
    const [a, b] = Array.isArray(m) ? m : m.split(' ');
    const id = vocab[a + b];
    if (id === undefined || addedIds.has(id)) continue;
    if (id < maxMergedId) throw new Error(`merge ${a} ${b} makes id ${id} after id ${maxMergedId}`);
    maxMergedId = id;
  }
  const unk = vocab[tok.model.unk_token];
  for (const [text, id] of Object.entries(vocab)) {
    if (id >= nVocab) continue;
    tokens[id] = text;
    if (/^<0x[0-9A-F]{2}>$/.test(text)) types[id] = T_BYTE, scores[id] = 0;
    else if (id === unk) types[id] = T_UNKNOWN, scores[id] = 0;
    else types[id] = T_NORMAL, scores[id] = -id;
  }
  for (const [sid, d] of Object.entries(cfg.added_tokens_decoder || {})) {
    const id = Number(sid);
    if (id >= nVocab) continue;
    let text = d.content;
    if (d.special || looksSpecial(text)) types[id] = T_CONTROL;
    else text = text.replaceAll('\u2581', ' '), types[id] = T_USER_DEFINED;
    tokens[id] = text;
    scores[id] = -1000;
  }
  const w = new Writer();
  w.str('general.architecture', arch.name);
  w.str('general.name', 'vocab-only');
  for (const [k, v] of Object.entries(arch.hparams)) {
    const float = k.endsWith('epsilon') || k.startsWith('rope.');
    (float ? w.f32 : w.u32).call(w, `${arch.name}.${k}`, v);
  }
  w.str('tokenizer.ggml.model', 'llama');
  w.str('tokenizer.ggml.pre', 'default');
  w.arr('tokenizer.ggml.tokens', G_STRING, tokens);
  w.arr('tokenizer.ggml.scores', G_FLOAT32, scores);
  w.arr('tokenizer.ggml.token_type', G_INT32, types);
  special(w, tok, cfg, nVocab);
  w.bool('tokenizer.ggml.add_space_prefix', false);
  return w;
}

function bpe(dir, nVocab, pre) {
  const { tok, cfg } = load(dir);
  const tokens = [], types = [];
  for (let i = 0; i < nVocab; i++) tokens.push(`[PAD${i}]`), types.push(T_UNUSED);
  for (const [text, id] of Object.entries(tok.model.vocab)) if (id < nVocab) tokens[id] = text, types[id] = T_NORMAL;
  for (const a of tok.added_tokens) {
    if (a.id >= nVocab) continue;
    tokens[a.id] = a.content;
    types[a.id] = a.special || looksSpecial(a.content) ? T_CONTROL : T_USER_DEFINED;
  }
  const w = new Writer();
  w.str('general.architecture', 'llama');
  w.str('general.name', 'vocab-only');
  w.u32('llama.context_length', 4096);
  w.u32('llama.embedding_length', 64);
  w.u32('llama.block_count', 1);
  w.u32('llama.feed_forward_length', 128);
  w.u32('llama.attention.head_count', 1);
  w.str('tokenizer.ggml.model', 'gpt2');
  w.str('tokenizer.ggml.pre', pre);
  w.arr('tokenizer.ggml.tokens', G_STRING, tokens);
  w.arr('tokenizer.ggml.token_type', G_INT32, types);
  w.arr('tokenizer.ggml.merges', G_STRING, tok.model.merges.map((m) => (Array.isArray(m) ? m.join(' ') : m)));
  special(w, tok, cfg, nVocab);
  return w;
}

// Gemma 3 hyperparameters (27B at 262208 entries, 1B at 262144): llama.cpp reads them even for a vocab-only load.
const gemma3 = (n) => ({
  name: 'gemma3',
  hparams: n > 262144
    ? { context_length: 131072, embedding_length: 5376, block_count: 62, feed_forward_length: 21504,
        'attention.head_count': 32, 'attention.head_count_kv': 16, 'attention.key_length': 128,
        'attention.value_length': 128, 'attention.layer_norm_rms_epsilon': 1e-6, 'attention.sliding_window': 1024,
        'rope.freq_base': 1e6 }
    : { context_length: 32768, embedding_length: 1152, block_count: 26, feed_forward_length: 6912,
        'attention.head_count': 4, 'attention.head_count_kv': 1, 'attention.key_length': 256,
        'attention.value_length': 256, 'attention.layer_norm_rms_epsilon': 1e-6, 'attention.sliding_window': 512,
        'rope.freq_base': 1e6 },
});

const [mode, dir, out, n, extra] = process.argv.slice(2);
const nVocab = Number(n);
if (!['spm', 'bpe'].includes(mode) || !dir || !out || !(nVocab > 0)) {
  console.error('usage: node hf_vocab_gguf.mjs spm|bpe DIR OUT.gguf N_VOCAB [PRE]');
  process.exit(2);
}
const w = mode === 'spm' ? spm(dir, nVocab, gemma3(nVocab)) : bpe(dir, nVocab, extra);
fs.writeFileSync(out + '.tmp', w.bytes());
fs.renameSync(out + '.tmp', out);
