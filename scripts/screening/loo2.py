# extra raw n-gram stats: LLM-argmax table and gain table (LOO for training folders)
import sys, os, numpy as np, time
sys.path.insert(0, '/work/main/python'); os.environ.setdefault('TOKROUTE_LIBRARY', '/work/main/build/libtokroute.so')
from tokroute.data import open_collected
V=513; K=6; t0=time.time()
def rows(folder):
    c = open_collected(folder)
    g = np.where(np.array(c.slm_top1)!=np.array(c.llm_top1), np.maximum(0, np.array(c.llm_p_top1)-np.array(c.llm_p_slm_top1)), 0)
    return [np.array(getattr(c, f)).astype(np.int64) for f in ('example','position','truth','slm_top1','llm_top1')] + [g.astype(np.float64)]
def prevs(ex, pos, truth):
    n=len(truth); out=np.full((K+1, n), -1, np.int64); out[0]=truth
    for j in range(1, K+1):
        ok = np.zeros(n, bool); ok[j:] = (ex[j:]==ex[:-j]) & (pos[j:]==pos[:-j]+j)
        pr = np.full(n, -1, np.int64); pr[ok] = truth[np.nonzero(ok)[0]-j]; pr[pos==j] = 1
        out[j]=pr
    return out
train = ['/tmp/lev/train','/tmp/r3/s1','/tmp/r3/s2','/tmp/r3/s3','/tmp/r3/s4']
table_only = [x for x in os.environ.get('EXTRA_TABLE','').split(',') if x]
SUF = os.environ.get('SUF',''); evals = ['/tmp/lev/eval','/tmp/r3/unseen']
data = {}
for fi, f in enumerate(train+evals+table_only):
    ex, pos, truth, s1, l1, g = rows(f); data[f] = (ex + fi*10**6, prevs(ex, pos, truth), s1, l1, g)
TR=[data[f] for f in train+table_only]
EXg=np.concatenate([d[0] for d in TR]); Tg=np.concatenate([d[1] for d in TR],1); S1g=np.concatenate([d[2] for d in TR]); L1g=np.concatenate([d[3] for d in TR]); Gg=np.concatenate([d[4] for d in TR])
def ctxkey(T, k):
    ok = (T[1:k+1] >= 0).all(0); ctx = np.zeros(T.shape[1], np.int64)
    for j in range(1, k+1): ctx = ctx*V + (np.maximum(T[j], -1)+1)
    return ctx, ok
def lookup(u, keys):
    i = np.clip(np.searchsorted(u, keys), 0, len(u)-1); return i, u[i]==keys
def table(keys, w=None):
    u, inv = np.unique(keys, return_inverse=True)
    return u, np.bincount(inv, w, len(u)) if w is not None else np.bincount(inv, None, len(u))
out = {f: np.zeros((len(data[f][2]), K, 6)) for f in train+evals}  # C, NL(s), ML1, Gsum, Cs, Gsum_s
for k in range(1, K+1):
    ctx, ok = ctxkey(Tg, k)
    cu, cinv = np.unique(ctx[ok], return_inverse=True); cinv=cinv.astype(np.int64)
    exk = EXg[ok]
    # global tables
    _, Cg = table(cinv); Gsum = np.bincount(cinv, Gg[ok], len(cu))
    lp_u, lp_c = table(cinv*V + L1g[ok])             # (ctx, llm_top1)
    sp_u, sp_c = table(cinv*V + S1g[ok]); _, sp_g = table(cinv*V + S1g[ok], Gg[ok])
    # LLM argmax top-3 per ctx
    pctx = lp_u//V; ptok = lp_u%V
    order = np.lexsort((-lp_c, pctx)); first = np.r_[True, pctx[order][1:]!=pctx[order][:-1]]
    gs = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0)); rk = np.zeros(len(lp_u), np.int64); rk[order] = np.arange(len(order))-gs
    top = np.full((len(cu),3), -1, np.int64)
    for r in range(3):
        sel = order[rk[order]==r]; top[pctx[sel], r] = ptok[sel]
    # local tables (per example)
    B = 1<<22
    lc_u, lc_c = table(exk*B + cinv); _, lc_g = table(exk*B + cinv, Gg[ok])
    ll_u, ll_c = table((exk*B + cinv)*V + L1g[ok])
    ls_u, ls_c = table((exk*B + cinv)*V + S1g[ok]); _, ls_g = table((exk*B + cinv)*V + S1g[ok], Gg[ok])
    for f in train+evals:
        exf, T, s1, l1, g = data[f]; loo = f in train
        c, okf = ctxkey(T, k); ci, hit = lookup(cu, c); hit &= okf
        def get(u, vals, keys, h=hit):
            i, hh = lookup(u, keys); return np.where(h & hh, vals[i], 0)
        C = np.where(hit, Cg[ci], 0).astype(float); Gs = np.where(hit, Gsum[ci], 0)
        NL = get(lp_u, lp_c, ci*V + s1).astype(float); Cs = get(sp_u, sp_c, ci*V+s1).astype(float); Gss = get(sp_u, sp_g, ci*V+s1)
        cand = [np.where(hit, top[ci, r], -1) for r in range(3)]
        cnt = [get(lp_u, lp_c, ci*V + np.maximum(cand[r],0), hit & (cand[r]>=0)).astype(float) for r in range(3)]
        if loo:
            lk = exf*B + ci
            C -= get(lc_u, lc_c, lk); Gs = Gs - get(lc_u, lc_g, lk)
            NL -= get(ll_u, ll_c, lk*V + s1); Cs -= get(ls_u, ls_c, lk*V+s1); Gss = Gss - get(ls_u, ls_g, lk*V+s1)
            cnt = [cnt[r] - get(ll_u, ll_c, lk*V + np.maximum(cand[r],0), hit & (cand[r]>=0)) for r in range(3)]
        ML = np.max(np.stack(cnt,1),1)
        out[f][:, k-1] = np.stack([C, NL, ML, Gs, Cs, Gss], 1)
    print('order', k, time.time()-t0, flush=True)
np.savez('/tmp/an/ngraw2'+SUF+'.npz', **{f.strip('/').split('/')[-1]: out[f] for f in train+evals})
