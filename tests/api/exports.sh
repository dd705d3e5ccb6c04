#!/usr/bin/env bash
# exports.sh — libtokroute.so exports exactly the functions tokroute.h declares: every defined dynamic symbol is
# one of them (internal helpers, tr_-prefixed or not, stay hidden), and every declared function is exported.
# usage: exports.sh LIBTOKROUTE_SO TOKROUTE_H
set -euo pipefail
lib=$1
header=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v nm >/dev/null || fail "nm (Debian binutils, see scripts/deps.sh) is needed"
[ -f "$lib" ] || fail "no shared library at $lib"
nm -D --defined-only "$lib" >/dev/null || fail "nm cannot read $lib"
nm -D --defined-only "$lib" | python3 -c '
import re, sys
import glob, os
# tokroute.h and the parts it includes (include/tokroute/*.h)
parts = [sys.argv[1]] + sorted(glob.glob(os.path.join(os.path.dirname(sys.argv[1]), "tokroute", "*.h")))
if len(parts) < 2:
    sys.exit("FAIL: no include/tokroute/*.h beside the header")
header = "".join(open(p).read() for p in parts)
code = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
declared = set(re.findall(r"\b(tr_[A-Za-z0-9_]+)\s*\((?!\s*\*)", code))  # not "tr_status (*fn_type)("
# symbols the linker itself defines in every shared object
linker = {"_init", "_fini", "_edata", "_end", "__bss_start"}
exported = set()
for line in sys.stdin:
    parts = line.split()
    if len(parts) >= 3 and parts[2] not in linker:
        exported.add(parts[2].split("@")[0])
if len(declared) < 100:
    sys.exit("FAIL: only %d functions found in the header: parsing is broken" % len(declared))
extra = sorted(exported - declared)
missing = sorted(declared - exported)
if extra:
    sys.exit("FAIL: %d symbols exported that tokroute.h does not declare: %s" % (len(extra), " ".join(extra[:40])))
if missing:
    sys.exit("FAIL: %d functions tokroute.h declares are not exported: %s" % (len(missing), " ".join(missing)))
print("ok: %d functions exported, all declared in tokroute.h" % len(exported))
' "$header"
