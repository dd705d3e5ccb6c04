#!/usr/bin/env python3
"""route_budget.py — budget controllers for the routed share, compared offline on generation traces.

Each trace (`tokroute generate --trace`, one JSON object per token) gives the router's score per generated token.
Every controller below sees the scores one at a time, as the routed loop does, and decides route / keep; the oracle
routes exactly the round(P·n) lowest scores of the whole trace. Per controller and target P we report the share
error |share - P| (mean and worst over the traces, in points), the share of traces within ±1.5 points, and the
decisions that differ from the oracle's (per 100 tokens), and the mean share. "budget.c" mirrors src/route/budget.c.
FIRST=N in the environment keeps each trace's first N tokens (short generations).

usage: route_budget.py TAU0 P TRACE.jsonl... (TAU0: the calibrated τ of P, the start of the controllers)
"""
import json
import math
import os
import sys


def oracle(scores, p):
    k = int(math.floor(p * len(scores) + 0.5))
    order = sorted(range(len(scores)), key=lambda i: (scores[i], i))
    routed = [False] * len(scores)
    for i in order[:k]:
        routed[i] = True
    return routed


def fixed(scores, p, tau0):
    return [s < tau0 for s in scores]


def bang_bang(scores, p, tau0):
    """τ is 1 while the routed count is behind P·i, 0 otherwise: routes whatever comes when behind."""
    out, r = [], 0
    for i, s in enumerate(scores):
        x = r < p * (i + 1)
        out.append(x)
        r += x
    return out


def pi_share(scores, p, tau0, kp=0.5, ki=0.02):
    """τ = τ0 + kp·(P - share) + ki·Σ(P - routed): PI on the share, in score units."""
    out, r, integ = [], 0, 0.0
    for i, s in enumerate(scores):
        share = r / i if i else p
        tau = tau0 + kp * (p - share) + ki * integ
        x = s < tau
        out.append(x)
        r += x
        integ += p - x
    return out


def sa_quantile(scores, p, tau0, eta=0.02):
    """Robbins-Monro quantile tracking: τ += η(P - routed) (integral control on the routed count)."""
    out, tau = [], tau0
    for s in scores:
        x = s < tau
        out.append(x)
        tau += eta * (p - x)
    return out


def window_quantile(window, level):
    w = sorted(window)
    k = int(level * len(w))
    return w[k] if k < len(w) else w[-1] + 1e-6


def quantile(scores, p, tau0, window=256, prior=0, horizon=0):
    """Route when the score is below the level-quantile of the last `window` scores, blended with τ0 as `prior`
    pseudo-scores' worth at the start; with horizon H > 0 the level is P + (P·i - routed)/H (the deficit spread
    over the next H tokens)."""
    out, r = [], 0
    for i, s in enumerate(scores):
        level = p
        if horizon:
            level = min(1.0, max(0.0, p + (p * i - r) / horizon))
        lo = max(0, i - window)
        m = i - lo
        if m == 0:
            tau = tau0
        else:
            q = window_quantile(scores[lo:i], level)
            w = m / (m + prior) if prior else 1.0
            tau = w * q + (1 - w) * tau0
        x = s < tau
        out.append(x)
        r += x
    return out


def inverse_density(window, p, tau0, minimum=8):
    """1 / the density of the scores at their P-quantile (as budget.c: the P ± δ quantiles' spread over 2δ)."""
    m = len(window)
    if m < minimum:
        return max(tau0, 0.01) / p
    w = sorted(window)
    d = max(p / 2, 2.0 / m)
    lo, hi = max(0.0, p - d), min(1.0, p + d)
    spread = (w[min(m - 1, int(lo * m))] - w[min(m - 1, int(hi * m))]) / (lo - hi)
    return max(spread, 1e-6)


TAU_ALL = 1.0009765625  # above every score: routes whatever comes


def budget(scores, p, tau0, gain=0.1, dead=1.0, base_rate=0.02, window=64, soft=1.5, hard=2.5, base_dead=True):
    """src/route/budget.c: τ = base + g·dz(e), base += base_rate·g·dz, g = gain / density, e = P·i - routed;
    beyond ±soft tokens τ ramps to route-all / route-none, reached where the next decision could leave ±hard.
    base_dead False: the base learns from e itself (no dead zone), so it centres the count on P·i."""
    out, r, base = [], 0, tau0
    for i, s in enumerate(scores):
        e = p * i - r
        dz = e - dead if e > dead else e + dead if e < -dead else 0.0
        learn = dz if base_dead else e
        g = gain * inverse_density(scores[max(0, i - window):i], p, tau0) if dz or learn else 0.0
        tau = min(1.0, max(0.0, base + g * dz))
        base = min(1.0, max(0.0, base + base_rate * g * learn))
        u = min(1.0, max(0.0, (abs(e) - soft) / (hard - soft)))
        tau = tau + (TAU_ALL - tau) * u if e > 0 else tau * (1 - u)
        if e + p > hard:
            tau = TAU_ALL
        elif e + p - 1 < -hard:
            tau = 0.0
        x = s < tau
        out.append(x)
        r += x
    return out


CONTROLLERS = [
    ("fixed tau0", fixed),
    ("bang-bang", bang_bang),
    ("PI share", pi_share),
    ("SA quantile .01", lambda s, p, t: sa_quantile(s, p, t, eta=0.01)),
    ("SA quantile .02", sa_quantile),
    ("quantile W64", lambda s, p, t: quantile(s, p, t, window=64)),
    ("quantile W256", lambda s, p, t: quantile(s, p, t, window=256)),
    ("quantile+deficit H10", lambda s, p, t: quantile(s, p, t, prior=16, horizon=10)),
    ("quantile+deficit H20", lambda s, p, t: quantile(s, p, t, prior=16, horizon=20)),
    ("budget.c, no dead zone", lambda s, p, t: budget(s, p, t, dead=0.0)),
    ("budget.c, no base", lambda s, p, t: budget(s, p, t, base_rate=0.0)),
    ("budget.c, no bounds", lambda s, p, t: budget(s, p, t, soft=1e9, hard=2e9)),
    ("budget.c, gain 0.15", lambda s, p, t: budget(s, p, t, gain=0.15)),
    ("budget.c (dead zone in base)", budget),
    ("base from e, rate .1", lambda s, p, t: budget(s, p, t, base_rate=0.1, base_dead=False)),
    ("base from e, rate .2", lambda s, p, t: budget(s, p, t, base_rate=0.2, base_dead=False)),
    ("base from e .15, dead .25", lambda s, p, t: budget(s, p, t, base_rate=0.15, dead=0.25, base_dead=False)),
    ("base from e .15, dead 0", lambda s, p, t: budget(s, p, t, base_rate=0.15, dead=0.0, base_dead=False)),
    ("budget.c from tau 0.5", lambda s, p, t: budget(s, p, 0.5)),
]


def main():
    tau0, p = float(sys.argv[1]), float(sys.argv[2])
    first = int(os.environ.get("FIRST", "0"))  # >0: only each trace's first FIRST tokens (short generations)
    traces = []
    for path in sys.argv[3:]:
        with open(path) as f:
            trace = [json.loads(line)["score"] for line in f if line.strip()]
            traces.append(trace[:first] if first else trace)
    print(f"target {p:.2f}, tau0 {tau0:.4g}, {len(traces)} traces, {sum(map(len, traces))} tokens")
    print(f"{'controller':28s} {'|err| mean':>10s} {'worst':>7s} {'in 1.5':>7s} {'diff/100':>9s} {'mean share':>10s}")
    for name, ctl in CONTROLLERS:
        errs, diffs, n_tok, ok, shares = [], 0, 0, 0, []
        for sc in traces:
            c, o = ctl(sc, p, tau0), oracle(sc, p)
            share = sum(c) / len(sc)
            shares.append(share)
            errs.append(abs(share - p) * 100)
            ok += abs(share - p) <= 0.015
            diffs += sum(a != b for a, b in zip(c, o))
            n_tok += len(sc)
        print(f"{name:28s} {sum(errs) / len(errs):10.2f} {max(errs):7.2f} {ok / len(traces):7.0%} "
              f"{100 * diffs / n_tok:9.2f} {100 * sum(shares) / len(shares):9.2f}%")


if __name__ == "__main__":
    main()
