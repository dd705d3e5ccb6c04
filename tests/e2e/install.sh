#!/usr/bin/env bash
# install.sh — tokroute installs as a C library: `cmake --install` of the build the CLI is in (nothing is rebuilt)
# into a temporary prefix puts the CLI, libtokroute.so (versioned SONAME) and libtokroute.a, the headers, tokroute.pc
# and the CMake package there; examples/ builds out of tree against it with pkg-config (examples/Makefile) and with
# find_package (examples/CMakeLists.txt, shared and static), and each program prints what `tokroute generate` does
# with the same models, prompt and token count; `make uninstall` then removes exactly what was installed. The build's
# own install_manifest.txt (a real `make install`'s) is put back afterwards.
set -euo pipefail
cli=$(realpath "$1")
shared=$(realpath "$2")
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(dirname "$cli")
source "$root/tests/support/e2e.sh"
for tool in cmake make cc pkg-config readelf nm python3; do
  command -v "$tool" >/dev/null || fail "$tool is needed (Debian: see scripts/deps.sh)"
done
[ -f "$build/cmake_install.cmake" ] || fail "$build is not a CMake build folder (no cmake_install.cmake)"
for lib in libtokroute.a libtokroute.so; do
  [ -e "$build/$lib" ] || fail "$build/$lib is not built: cmake --build $build (the default target builds it)"
done
manifest=$build/install_manifest.txt
unset DESTDIR  # a staging folder in the environment would move the install (and the uninstall) under it
if [ -f "$manifest" ]; then
  cp "$manifest" "$tmp/manifest.saved"
  trap 'cp "$tmp/manifest.saved" "$manifest"; e2e_cleanup' EXIT
else
  trap 'rm -f "$manifest"; e2e_cleanup' EXIT
fi

# --- install into a prefix that already holds someone else's files
prefix=$tmp/prefix
mkdir -p "$prefix/lib" "$prefix/include"
echo keep >"$prefix/lib/other.txt"
echo keep >"$prefix/include/other.h"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "cmake --install"; }
pc=$(find "$prefix" -name tokroute.pc)
[ -n "$pc" ] || fail "no tokroute.pc installed"
libdir=$(dirname "$(dirname "$pc")")
[ -x "$prefix/bin/tokroute" ] || fail "no CLI at $prefix/bin/tokroute"
[ -f "$libdir/libtokroute.a" ] || fail "no libtokroute.a in $libdir"
[ -f "$libdir/cmake/tokroute/tokrouteConfig.cmake" ] && [ -f "$libdir/cmake/tokroute/tokrouteConfigVersion.cmake" ] \
  || fail "no CMake package in $libdir/cmake/tokroute"
for h in "$root"/include/tokroute.h "$root"/include/tokroute/*.h; do
  cmp -s "$h" "$prefix/include/${h#"$root"/include/}" || fail "header ${h#"$root"/} not installed as it is"
done
# Every installed file is in the manifest and the other way round (uninstall relies on it).
( cd "$prefix" && find . ! -type d | sed "s|^\.|$prefix|" | grep -v "/other\.[th]" | sort ) >"$tmp/found"
sort "$manifest" >"$tmp/listed"
diff "$tmp/listed" "$tmp/found" >&2 || fail "install_manifest.txt differs from the files installed"

# --- the SONAME carries the version: MAJOR, or MAJOR.MINOR while MAJOR is 0
read -r major minor patch <<<"$(sed -n 's/^#define TR_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' \
  "$root/include/tokroute.h" | tr '\n' ' ')"
version=$major.$minor.$patch
if [ "$major" = 0 ]; then soversion=$major.$minor; else soversion=$major; fi
soname=libtokroute.so.$soversion
readelf -d "$libdir/libtokroute.so.$version" >"$tmp/dynamic" || fail "no libtokroute.so.$version"
grep -q "Library soname: \[$soname\]" "$tmp/dynamic" || { cat "$tmp/dynamic" >&2; fail "SONAME is not $soname"; }
[ "$(readlink "$libdir/$soname")" = "libtokroute.so.$version" ] || fail "$soname does not link to the library"
[ "$(readlink "$libdir/libtokroute.so")" = "$soname" ] || fail "libtokroute.so does not link to $soname"
# The installed library exports exactly what the installed headers declare.
bash "$root/tests/api/exports.sh" "$libdir/libtokroute.so" "$prefix/include/tokroute.h" >/dev/null
[ "$("$prefix/bin/tokroute" --version)" = "tokroute $version" ] || fail "installed CLI: $("$prefix/bin/tokroute" --version)"

# --- pkg-config: the shared library by default; libtokroute.a's own needs with --static
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --modversion tokroute)" = "$version" ] || fail "pkg-config version is not $version"
[ "$(pkg-config --variable=prefix tokroute)" = "$prefix" ] || fail "tokroute.pc does not name the prefix it went to"
[ "$(pkg-config --print-requires-private tokroute | sort | tr '\n' ' ')" = "libcjson libcurl libmicrohttpd libpcre2-8 " ] \
  || fail "Requires.private: $(pkg-config --print-requires-private tokroute | tr '\n' ' ')"
static_libs=" $(pkg-config --static --libs tokroute) "
for flag in -ltokroute -pthread -lm -lpcre2-8 -lcjson -lcurl -lmicrohttpd; do
  [[ $static_libs == *" $flag "* ]] || fail "pkg-config --static --libs tokroute lacks $flag: $static_libs"
done
# libtokroute.a links with what the package names and nothing more: the whole archive (every object, so every
# dependency) into a program, from tokroute.pc's private fields here and from tokroute::tokroute_static below.
echo 'int main(void) { return 0; }' >"$tmp/main.c"
libs_private=$(sed -n 's/^Libs.private: *//p' "$pc")
for flag in -pthread -lm; do
  [[ " $libs_private " == *" $flag "* ]] || fail "Libs.private lacks $flag: $libs_private"
done
# shellcheck disable=SC2046,SC2086 # flags are words
cc "$tmp/main.c" -o "$tmp/whole-pc" -Wl,--whole-archive "$libdir/libtokroute.a" -Wl,--no-whole-archive $libs_private \
  $(pkg-config --libs $(pkg-config --print-requires-private tokroute)) $(pkg-config --libs-only-other tokroute) \
  2>"$tmp/whole-pc.log" || { cat "$tmp/whole-pc.log" >&2; fail "libtokroute.a does not link with tokroute.pc's flags"; }
mkdir "$tmp/pc"
(cd "$tmp/pc" && make -f "$root/examples/Makefile" LDFLAGS="-Wl,-rpath,$libdir") >"$tmp/pc.log" 2>&1 \
  || { cat "$tmp/pc.log" >&2; fail "examples/Makefile (pkg-config) did not build"; }

# --- find_package(tokroute): the shared library, then the static one
for kind in shared static; do
  static=OFF
  [ "$kind" = static ] && static=ON
  cmake -S "$root/examples" -B "$tmp/cmake-$kind" -DCMAKE_PREFIX_PATH="$prefix" -DTOKROUTE_STATIC=$static \
    >"$tmp/cmake-$kind.log" 2>&1 && cmake --build "$tmp/cmake-$kind" >>"$tmp/cmake-$kind.log" 2>&1 \
    || { cat "$tmp/cmake-$kind.log" >&2; fail "examples/CMakeLists.txt ($kind) did not build"; }
done
grep -q "tokroute_DIR:PATH=$libdir/cmake/tokroute" "$tmp/cmake-shared/CMakeCache.txt" \
  || fail "find_package found another tokroute: $(grep tokroute_DIR "$tmp/cmake-shared/CMakeCache.txt")"
mkdir "$tmp/cmake-whole"
cp "$tmp/main.c" "$tmp/cmake-whole/"
echo 'cmake_minimum_required(VERSION 3.24)
project(whole C)
find_package(tokroute REQUIRED)
add_executable(whole main.c)
target_link_libraries(whole PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,tokroute::tokroute_static>")' \
  >"$tmp/cmake-whole/CMakeLists.txt"
cmake -S "$tmp/cmake-whole" -B "$tmp/cmake-whole/b" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/whole.log" 2>&1 \
  && cmake --build "$tmp/cmake-whole/b" >>"$tmp/whole.log" 2>&1 \
  || { cat "$tmp/whole.log" >&2; fail "libtokroute.a does not link with tokroute::tokroute_static's dependencies"; }
"$tmp/whole-pc" && "$tmp/cmake-whole/b/whole" || fail "a program holding all of libtokroute.a does not start"
# The version file refuses an older ABI: before 1.0 another minor version (its SONAME differs), after it another major.
if [ "$major" = 0 ] && [ "$minor" -gt 0 ]; then older=0.$((minor - 1)); else older=$((major + 1)).0; fi
mkdir "$tmp/cmake-version"
echo "cmake_minimum_required(VERSION 3.18)
project(v C)
find_package(tokroute $older REQUIRED)" >"$tmp/cmake-version/CMakeLists.txt"
! cmake -S "$tmp/cmake-version" -B "$tmp/cmake-version/b" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/version.log" 2>&1 \
  || fail "find_package(tokroute $older) accepted version $version"
grep -q "$version" "$tmp/version.log" || { cat "$tmp/version.log" >&2; fail "the refusal does not name $version"; }

# Shared builds load the installed library; the static build carries it. (grep -q reads a captured output: fed
# by a pipe it may stop reading early, and the writer's SIGPIPE would fail the pipeline under pipefail.)
for dir in pc cmake-shared; do
  for prog in example_generate example_route; do
    grep -q "Shared library: \[$soname\]" <<<"$(readelf -d "$tmp/$dir/$prog")" || fail "$dir/$prog does not need $soname"
    grep -q "$soname => $libdir/$soname" <<<"$(ldd "$tmp/$dir/$prog")" || fail "$dir/$prog does not load $libdir/$soname"
  done
done
for prog in example_generate example_route; do
  ! grep -q "libtokroute" <<<"$(readelf -d "$tmp/cmake-static/$prog")" || fail "static $prog needs libtokroute.so"
  grep -q " T tr_model_load$" <<<"$(nm "$tmp/cmake-static/$prog")" || fail "static $prog lacks the library's code"
done

# --- each program prints what the installed CLI generates (greedy) with the same models, prompt and count
prompt="The little dog"
"$prefix/bin/tokroute" generate -m "$slm" -p "$prompt" -n 48 --no-summary >"$tmp/want_generate" 2>/dev/null
"$prefix/bin/tokroute" generate --slm "$slm" --llm "$llm" --policy maxprob --threshold 0.5 -p "$prompt" -n 48 \
  --summary-json >"$tmp/want_route" 2>"$tmp/want_route.err"
routed=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["n_routed"])' \
  <"$tmp/want_route.err")
[ "$routed" -gt 0 ] && [ "$routed" -lt 48 ] || fail "the CLI routed $routed of 48 tokens: not a mix of both models"
[ "$(wc -c <"$tmp/want_generate")" -gt 40 ] || fail "the CLI generated almost nothing"
printf '%s\n' "48 tokens, $routed routed" >>"$tmp/want_route"
for dir in pc cmake-shared cmake-static; do
  "$tmp/$dir/example_generate" "$slm" "$prompt" 48 >"$tmp/got" || fail "$dir/example_generate failed"
  cmp -s "$tmp/want_generate" "$tmp/got" || { diff "$tmp/want_generate" "$tmp/got" >&2; fail "$dir/example_generate"; }
  "$tmp/$dir/example_route" "$slm" "$llm" "$prompt" 48 >"$tmp/got" || fail "$dir/example_route failed"
  cmp -s "$tmp/want_route" "$tmp/got" || { diff "$tmp/want_route" "$tmp/got" >&2; fail "$dir/example_route"; }
done

# --- make uninstall removes exactly the installed files and tokroute's own folders, nothing else
make -s -C "$root" uninstall BUILD="$build" >"$tmp/uninstall.log" 2>&1 || { cat "$tmp/uninstall.log" >&2; fail "make uninstall"; }
left=$(cd "$prefix" && find . ! -type d | sort | tr '\n' ' ')
[ "$left" = "./include/other.h ./lib/other.txt " ] || fail "after uninstall the prefix holds: $left"
[ -z "$(find "$prefix" -name 'tokroute*')" ] || fail "tokroute folders left: $(find "$prefix" -name 'tokroute*')"
echo "ok: installed, $soname, examples built with pkg-config and find_package (shared, static) agree with the CLI," \
  "uninstalled"
