#!/usr/bin/env bash
# check-neon.sh — proves the kernels (NEON path included) compile for aarch64, with Debian's cross compiler
# (installed when missing and running as root). Only src/kernels is compiled: it needs no third-party headers.
set -euo pipefail
cd "$(dirname "$0")/.."
cc=aarch64-linux-gnu-gcc
if ! command -v "$cc" >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then echo "check-neon: $cc missing (apt-get install gcc-aarch64-linux-gnu)" >&2; exit 1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null; }
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0
# Baseline ARMv8 (NEON without sdot) and ARMv8.2 with the dot-product extension.
for arch in armv8-a armv8.2-a+dotprod; do
  for f in src/kernels/*.c; do
    case "$f" in *_avx2.c|*_avx512.c) continue ;; esac
    "$cc" -std=c11 -D_GNU_SOURCE -O2 -march="$arch" -Wall -Wextra -Werror -Wno-unused-parameter \
      -Iinclude -Isrc -c "$f" -o "$out/$(basename "$f").o"
    n=$((n + 1))
  done
done
echo "check-neon: $n compilations of the kernels for aarch64 passed ($("$cc" --version | head -1))"
