#!/usr/bin/env python3
"""induction_gain.py DIR — where the routing gain sits by induction case, from collected records: for each position p,
x = the token at p-1; its latest earlier occurrence with the longest match of the tokens before it (m, capped at 4
here) and c = the token that followed it then; positions grouped by m and by whether c is the SLM's top-1, with their
share of the positions, of the realized gain ([LLM right] - [SLM right]) and the expected gain p(l) - p(s) per
position (the bound's score). The question behind the router's `induction` feature (docs/train.md). Reads text and
llm-sample collects (records from position 1; layout: src/train/data_file.c); python3 stdlib only."""
import struct
import sys
from collections import defaultdict

HEADER = 512


def examples(folder):
    b = open(folder + "/positions.bin", "rb").read()
    size = struct.unpack_from("<I", b, 16)[0]
    ex = defaultdict(list)
    for off in range(HEADER, len(b) - size + 1, size):
        e, p, truth, s1, l1 = struct.unpack_from("<2I3i", b, off)
        f = struct.unpack_from("<11f", b, off + 20)
        ex[e].append((p, truth, s1, f[1] - f[9], int(l1 == truth) - int(s1 == truth)))
    return ex


def case(toks, p, s1):
    x = toks.get(p - 1)
    best, c = 0, None
    for q in range(p - 2, 0, -1):
        if x is None or toks.get(q) != x:
            continue
        m = 1
        while m < 4 and q - m >= 1 and toks.get(q - m) is not None and toks.get(q - m) == toks.get(p - 1 - m):
            m += 1
        if m > best:
            best, c = m, toks[q + 1]
    if c is None:
        return "no earlier x"
    return "match %d%s, c %s top-1" % (min(best, 3), "+" if best >= 3 else "", "==" if c == s1 else "!=")


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    rows = defaultdict(lambda: [0, 0, 0.0])
    n = gain = 0
    for recs in examples(sys.argv[1]).values():
        toks = {p: t for p, t, _, _, _ in recs}
        for p, _, s1, expected, g in recs:
            r = rows[case(toks, p, s1)]
            r[0] += 1
            r[1] += g
            r[2] += expected
            n += 1
            gain += g
    print("%d positions, realized gain %d" % (n, gain))
    for k in sorted(rows):
        c, g, e = rows[k]
        print("%-24s %5.1f%% of positions  %5.1f%% of the gain  expected gain %.3f per position"
              % (k, 100.0 * c / n, 100.0 * g / gain if gain else 0.0, e / c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
