#!/usr/bin/env bash
# llamacpp.sh — builds llama.cpp targets (llama-server, llama-bench, ...) from the source that the npm package
# node-llama-cpp ships as llama/gitRelease.bundle, once per machine, cached outside the repository.
#   scripts/llamacpp.sh TARGET...      builds the targets if missing; prints the bin folder on stdout
# Cache: $TOKROUTE_CACHE (default ~/.cache/tokroute)/llama.cpp-<version>/{src,build}. Concurrent callers wait on a
# lock, so two test runs never build into the same folder at once.
# LLAMACPP_NO_AMX=1 builds into build-noamx/ without Intel AMX kernels (compiled in by -march=native on CPUs that
# report AMX; where the hypervisor does not let a guest use AMX they stop llama.cpp with a protection fault).
set -euo pipefail
version=3.22.1
cache=${TOKROUTE_CACHE:-$HOME/.cache/tokroute}
root=$cache/llama.cpp-$version
[ $# -gt 0 ] || { echo "usage: scripts/llamacpp.sh TARGET..." >&2; exit 2; }
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9

build=$root/build
cflags=()
if [ "${LLAMACPP_NO_AMX:-0}" = 1 ]; then
  build=$root/build-noamx
  # explicit -mno-* flags win over what -march=native turns on
  cflags=(-DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
fi
missing=()
for t in "$@"; do [ -x "$build/bin/$t" ] || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  command -v npm >/dev/null || { echo "tokroute: npm is needed to fetch llama.cpp's source (apt-get install npm)" >&2; exit 1; }
  command -v g++ >/dev/null || { echo "tokroute: g++ is needed to build llama.cpp (apt-get install g++)" >&2; exit 1; }
  if [ ! -d "$root/src/.git" ]; then
    echo "tokroute: fetching llama.cpp source from npm node-llama-cpp@$version" >&2
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "node-llama-cpp@$version" >/dev/null &&
      tar xzf "node-llama-cpp-$version.tgz" package/llama/gitRelease.bundle)
    rm -rf "$root/src"
    git clone -q "$tmp/package/llama/gitRelease.bundle" "$root/src" 2>/dev/null
    rm -rf "$tmp"
  fi
  echo "tokroute: building llama.cpp ${missing[*]} (once per machine, cached in $root)" >&2
  cmake -S "$root/src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF "${cflags[@]}" >"$build.configure.log" 2>&1 ||
    { tail -20 "$build.configure.log" >&2; exit 1; }
  cmake --build "$build" -j"$(nproc)" --target "${missing[@]}" >"$build.build.log" 2>&1 ||
    { tail -30 "$build.build.log" >&2; exit 1; }
fi
echo "$build/bin"
