#!/usr/bin/env bash
# check-neon.sh — the aarch64 (NEON) kernels: every kernel file must compile with Debian's cross compiler for
# baseline ARMv8 and for ARMv8.2+dotprod, and tests/neon/neon_check.c (NEON vs scalar vs float64 for every
# weight type) must pass under qemu-aarch64. Missing tools are installed when running as root.
set -euo pipefail
cd "$(dirname "$0")/.."
cc=aarch64-linux-gnu-gcc
install() {
  [ "$(id -u)" -eq 0 ] || { echo "check-neon: missing $* (apt-get install $*)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
}
command -v "$cc" >/dev/null || install gcc-aarch64-linux-gnu libc6-dev-arm64-cross
command -v qemu-aarch64 >/dev/null || install qemu-user
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
kernels=$(ls src/kernels/*.c | grep -v -E '_(avx2|avx512)\.c$')
n=0
for arch in armv8-a armv8.2-a+dotprod; do
  for f in $kernels; do
    "$cc" -std=c11 -D_GNU_SOURCE -O2 -march="$arch" -Wall -Wextra -Werror -Wno-unused-parameter \
      -Iinclude -Isrc -c "$f" -o "$out/$(basename "$f").o"
    n=$((n + 1))
  done
  "$cc" -std=c11 -D_GNU_SOURCE -O2 -march="$arch" -Iinclude -Isrc tests/neon/neon_check.c $kernels \
    src/common/error.c src/common/platform.c -static -lm -lpthread -o "$out/neon_check"
  # qemu emulates the dot-product extension too, so both builds really run.
  qemu-aarch64 -cpu max "$out/neon_check" >"$out/log" || { cat "$out/log"; echo "check-neon: $arch FAILED" >&2; exit 1; }
  echo "check-neon: $arch: $(tail -1 "$out/log")"
done
echo "check-neon: $n compilations of the kernels for aarch64 passed ($("$cc" --version | head -1))"
