#!/usr/bin/env bash
# fresh-root.sh [--rev REV] [--keep] — the README's quickstart on a machine where nothing is installed (CI runs it,
# .ci/run): a minimal Debian root (debootstrap --variant=minbase bookworm, made once and kept untouched as a tarball
# in ${TOKROUTE_CACHE:-~/.cache/tokroute}) is unpacked into a scratch folder; this checkout's tracked files (as in the
# working tree, or commit REV with --rev) and ../shared are copied in as /src/tokroute and /src/shared; then, as root
# in that root: `apt-get install make` (the one tool a reader installs first), `make demo` (installs its own
# packages, builds, runs the demo), `make` and `make install` (cmocka and Node.js must still be absent after them),
# `scripts/deps.sh test` (make test's set-up step: the test packages and tests/ui's npm packages), and a reconfigure
# of the same build with TR_TESTS=ON that must find the tests and recompile nothing. Each step's time is printed; a
# failing step prints its log's tail and fails the script. The scratch root (a tmpfs when 8 GiB of memory are free)
# is removed on every exit (--keep: kept on disk, its path printed). Needs root (chroot, mounts) and Debian's package
# archive (this machine's mirror, DNS, apt proxy settings, proxy variables and trusted CAs are carried in);
# downloaded .debs are cached beside the base root.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "fresh-root: needs root (debootstrap, chroot and mounts)" >&2; exit 1; }
# The whole run in a private mount namespace: what it mounts (the scratch tmpfs, debootstrap's /proc) goes with it,
# however it ends.
if [ -z "${FRESH_ROOT_PRIVATE:-}" ]; then
  FRESH_ROOT_PRIVATE=1 exec unshare --mount --propagation private "$0" "$@"
fi
usage() { echo "usage: scripts/fresh-root.sh [--rev REV] [--keep]" >&2; exit 2; }
rev='' keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) [ $# -ge 2 ] || usage; rev=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) usage ;;
  esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
shared=$(cd "$src/.." && pwd)/shared
cache=${TOKROUTE_CACHE:-$HOME/.cache/tokroute}
base=$cache/debian-bookworm-minbase.tar
debs=$cache/debian-bookworm-debs
say() { echo "fresh-root: $*"; }
die() { echo "fresh-root: $*" >&2; exit 1; }
[ -d "$shared/models" ] || die "missing $shared (the shared data folder should sit beside this checkout)"
mkdir -p "$cache" "$debs"

# The Debian mirror this machine's apt uses (deb822 or one-line sources), else Debian's usual one.
host_uri() {  # $1: suite
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v suite="$1" '
      /^deb /   { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { if ($(i + 1) == suite) print $i; break } }
      /^URIs:/  { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite && uri != "") print uri }
      /^$/      { uri = "" }' "$f"
  done | head -1
}
mirror=$(host_uri bookworm)
mirror=${mirror:-http://deb.debian.org/debian}
security=$(host_uri bookworm-security)
security=${security:-http://deb.debian.org/debian-security}

step_start=0
step() { step_start=$(date +%s); say "$*"; }
step_done() { say "  done in $(($(date +%s) - step_start)) s"; }
t_all=$(date +%s)

# One run at a time per cache (the base tarball, the .deb cache).
exec 9>"$cache/debian-bookworm.lock"
flock -w 3600 9 || die "another fresh-root.sh holds $cache/debian-bookworm.lock"

scratch='' in_root_pid='' in_memory=0
mounted_under() { awk -v d="$1" 'index($2, d "/") == 1 || $2 == d { found = 1 } END { exit !found }' /proc/mounts; }
cleanup() {
  local rc=$?
  if [ -n "$in_root_pid" ]; then  # interrupted in a step: unshare ignores TERM and INT while it waits, so KILL;
    kill -KILL "$in_root_pid" 2>/dev/null || true  # its --kill-child then ends the root's pid 1, and all with it
    wait "$in_root_pid" 2>/dev/null || true
  fi
  [ -n "$scratch" ] && [ -d "$scratch" ] || exit $rc
  if [ "$in_memory" -eq 1 ]; then
    umount "$scratch" 2>/dev/null || umount -l "$scratch"
    rmdir "$scratch"
    exit $rc
  fi
  if mounted_under "$scratch"; then  # only possible if a mount escaped the private namespace: never delete through it
    echo "fresh-root: mounts left under $scratch: not removed" >&2
    exit 1
  fi
  if [ "$keep" -eq 1 ]; then say "kept $scratch/root"; else rm -rf "$scratch"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A scratch folder an earlier run left behind when it was killed (its pid gone, nothing mounted): removed.
for old in "$cache"/fresh-root.*; do
  [ -d "$old" ] || continue
  kill -0 "${old##*.}" 2>/dev/null && continue
  mounted_under "$old" || rm -rf "$old"
done

if [ ! -f "$base" ]; then
  step "creating the base root: debootstrap --variant=minbase bookworm from $mirror (once; cached in $base)"
  if ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  fi
  tmp=$cache/fresh-root.$$
  mkdir -p "$tmp/root"
  scratch=$tmp
  debootstrap --variant=minbase bookworm "$tmp/root" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
    { tail -30 "$tmp/debootstrap.log" >&2; die "debootstrap failed"; }
  tar -C "$tmp/root" --numeric-owner -cpf "$base.part" . && mv "$base.part" "$base"
  rm -rf "$tmp"
  scratch=
  step_done
fi

scratch=$cache/fresh-root.$$
root=$scratch/root
mkdir -p "$scratch"
# In memory when there is room (removing the installed root from a busy disk took 20 to 80 s here), mounted in this
# namespace only; on disk with --keep.
if [ "$keep" -eq 0 ] && [ "$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)" -ge $((8 * 1024 * 1024)) ]; then
  mount -t tmpfs -o size=8g,mode=0755 fresh-root "$scratch"
  in_memory=1
fi
mkdir -p "$root" "$scratch/logs"
step "unpacking the base root into $root$([ "$in_memory" -eq 1 ] && echo " (a tmpfs)")"
tar -C "$root" --numeric-owner -xpf "$base"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# apt settings this machine needs to reach the archive (a proxy, a snapshot mirror's dates), nothing else.
for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
  [ -f "$f" ] && grep -qiE 'proxy|Check-Valid-Until|Check-Date' "$f" && cp "$f" "$root/etc/apt/apt.conf.d/"
done
# The CAs this machine trusts (a TLS-inspecting proxy's among them), for npm's HTTPS requests: NODE_EXTRA_CA_CERTS.
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$root/etc/ssl" && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/host-ca.crt"
fi
# A scratch root: dpkg need not sync every file it unpacks.
echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/fresh-root-unsafe-io"
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
  "$mirror" "$mirror" "$security" >"$root/etc/apt/sources.list"
step_done

if [ -n "$rev" ]; then
  step "copying commit $rev of $src and $shared into /src"
else
  step "copying the tracked files of $src (working tree) and $shared into /src"
fi
mkdir -p "$root/src/tokroute" "$root/src/shared"
if [ -n "$rev" ]; then
  git -C "$src" archive "$rev" | tar -C "$root/src/tokroute" -xf -
elif git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$src" && git ls-files -z | while IFS= read -r -d '' f; do
    if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
  done | tar --null -T - -cf -) | tar -C "$root/src/tokroute" -xf -
else  # a checkout without git: everything but build outputs and installed packages
  tar -C "$src" --exclude=./.git --exclude=./build --exclude='./build-*' --exclude=./out \
    --exclude=./tests/ui/node_modules -cf - . | tar -C "$root/src/tokroute" -xf -
fi
cp -a "$shared/." "$root/src/shared/"
say "  $(cd "$root/src/tokroute" && find . -type f | wc -l) files," \
  "$(du -sh "$root/src/shared" | cut -f1) of shared data"
step_done

# This machine's way out: its proxy variables, and its CAs for Node.js (when copied above).
net_env=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!v:-}" ] && net_env+=("$v=${!v}")
done
[ -f "$root/etc/ssl/host-ca.crt" ] && net_env+=(NODE_EXTRA_CA_CERTS=/etc/ssl/host-ca.crt)

# Runs a command as root in the fresh root, in its own mount and pid namespaces: the mounts (/proc, /sys, /dev, the
# .deb cache) and every process started there end with it, whatever way it exits. It runs in the background and is
# waited for, so that a signal reaches this script's trap at once (cleanup then stops it).
in_root() {  # $1: log name, $2: command (bash -c, in /src/tokroute)
  local log=$scratch/logs/$1.log
  local rc=0
  unshare --mount --pid --fork --kill-child --propagation private bash -c '
      set -e; r=$1
      mount -t proc proc "$r/proc"
      mount -t sysfs sys "$r/sys"
      mount --rbind /dev "$r/dev"
      mount --bind "$2" "$r/var/cache/apt/archives"
      exec chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive "${@:4}" bash -c "cd /src/tokroute && $3"
    ' fresh-root "$root" "$debs" "$2" "${net_env[@]}" >"$log" 2>&1 &
  in_root_pid=$!
  wait "$in_root_pid" || rc=$?
  in_root_pid=''
  if [ "$rc" -ne 0 ]; then
    tail -40 "$log" >&2
    echo "fresh-root: FAILED in the root after $(($(date +%s) - step_start)) s: $2 (its log's tail above)" >&2
    return 1
  fi
}

step "in the root: apt-get install make (the tool a reader installs before make demo)"
in_root make 'apt-get update -qq && apt-get install -y -qq --no-install-recommends make >/dev/null' || exit 1
step_done

step "in the root: make demo"
in_root demo 'make demo' || die "make demo failed on a fresh Debian"
grep -q '== the LLM alone' "$scratch/logs/demo.log" ||
  { tail -20 "$scratch/logs/demo.log" >&2; die "make demo did not run to its end"; }
say "  the demo ran to its end"
step_done

step "in the root: make (everything) and make install (into /usr/local)"
in_root build-install 'make && make install && /usr/local/bin/tokroute --help >/dev/null' ||
  die "make or make install failed on a fresh Debian"
in_root absent '! dpkg-query -W -f="\${Status}" libcmocka-dev 2>/dev/null | grep -q "install ok installed" &&
  ! command -v node && ! command -v npm' ||
  die "a build target installed a test tool (cmocka or Node.js): the check would not prove the quickstart"
say "  cmocka and Node.js still not installed"
step_done

step "in the root: scripts/deps.sh test (make test's set-up step)"
in_root deps-test 'scripts/deps.sh test && [ -f tests/ui/node_modules/playwright-core/package.json ] &&
  [ -f tests/ui/node_modules/openai/package.json ]' || die "scripts/deps.sh test failed on a fresh Debian"
step_done

step "in the root: build/ reconfigured with TR_TESTS=ON finds the tests and rebuilds nothing of the CLI"
in_root tests-on 'cmake -S . -B build -DTR_TESTS=ON >/dev/null && cmake --build build --target tokroute &&
  n=$(cd build && ctest -N | sed -n "s/^Total Tests: //p") && echo "tests: $n" && [ "$n" -gt 0 ]' ||
  die "build/ reconfigured with TR_TESTS=ON failed"
if grep -q 'Building C object' "$scratch/logs/tests-on.log"; then
  grep 'Building C object' "$scratch/logs/tests-on.log" | head -5 >&2
  die "switching build/ from TR_TESTS=AUTO to ON recompiled the CLI"
fi
say "  $(grep '^tests: ' "$scratch/logs/tests-on.log")"
step_done

say "passed in $(($(date +%s) - t_all)) s"
