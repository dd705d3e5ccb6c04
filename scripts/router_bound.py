#!/usr/bin/env python3
"""router_bound.py DIR [DIR...] — the share of the SLM-to-LLM gap closed at 5/10/20% routed on collected data by
(a) the oracle (routes where only the LLM is right) and (b) the bound a router reading only the SLM faces: routing by
the LLM's own expected gain p(l) - p(s), the quantity train-router's expected labels teach (l, s: the LLM's and the
SLM's top-1, p: the LLM's distribution; computing it needs the LLM at every position). Reads the records collect
wrote (layout: src/train/data_file.c); python3 stdlib only. Usage: scripts/router_bound.py data/eval"""
import struct
import sys

HEADER = 512


def records(folder):
    b = open(folder + "/positions.bin", "rb").read()
    size = struct.unpack_from("<I", b, 16)[0]
    for off in range(HEADER, len(b) - size + 1, size):
        _, _, truth, s1, l1 = struct.unpack_from("<5I", b, off)
        f = struct.unpack_from("<11f", b, off + 20)
        # f: slm_p_top1 llm_p_top1 slm_p_truth llm_p_truth maxprob entropy margin (rollouts) llm_p_slm_top1 ...
        yield s1 == truth, l1 == truth, f[1] - f[9]


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) >= 2 else 2
    rows = [r for d in sys.argv[1:] for r in records(d)]
    n = len(rows)
    slm = sum(s for s, _, _ in rows) / n
    llm = sum(l for _, l, _ in rows) / n
    gain = [int(l) - int(s) for s, l, _ in rows]

    def closed(score, share):  # routes the lowest scores
        order = sorted(range(n), key=lambda i: score[i])[: int(round(share * n))]
        return (sum(gain[i] for i in order) / n) / (llm - slm)

    print("%d positions: SLM accuracy %.4f, LLM %.4f" % (n, slm, llm))
    for name, score in (("oracle", [-g for g in gain]), ("LLM expected gain", [-e for _, _, e in rows])):
        print("%-18s" % name + "  ".join("%4.0f%%: %5.1f%%" % (t * 100, closed(score, t) * 100) for t in (0.05, 0.1, 0.2)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
