# n-gram features (screening): LOO for training folders, full table for eval folders; writes /tmp/ng/<name>/extra.f32
import sys, os, numpy as np, time
sys.path.insert(0, '/work/main/python'); os.environ.setdefault('TOKROUTE_LIBRARY', '/work/main/build/libtokroute.so')
from tokroute.data import open_collected
V=513; K=6; MINC=int(os.environ.get('MINC', 5))
t0=time.time()
def rows(folder):
    c = open_collected(folder)
    return np.array(c.example).astype(np.int64), np.array(c.position).astype(np.int64), np.array(c.truth).astype(np.int64), np.array(c.slm_top1).astype(np.int64)
def prevs(ex, pos, truth):
    n=len(truth); out=np.full((K+1, n), -1, np.int64); out[0]=truth
    for j in range(1, K+1):
        ok = np.zeros(n, bool); ok[j:] = (ex[j:]==ex[:-j]) & (pos[j:]==pos[:-j]+j)
        pr = np.full(n, -1, np.int64); pr[ok] = truth[np.nonzero(ok)[0]-j]; pr[pos==j] = 1
        out[j]=pr
    return out
train = ['/tmp/lev/train','/tmp/r3/s1','/tmp/r3/s2','/tmp/r3/s3','/tmp/r3/s4']
table_only = [x for x in os.environ.get('EXTRA_TABLE','').split(',') if x]
SUF = os.environ.get('SUF','')
evals = ['/tmp/lev/eval','/tmp/r3/unseen']
data = {}
for fi, f in enumerate(train+evals+table_only):
    ex, pos, truth, s1 = rows(f)
    data[f] = (ex + fi*10**6, prevs(ex, pos, truth), s1)
print('loaded', time.time()-t0)
TR = [data[f] for f in train+table_only]
EXg = np.concatenate([d[0] for d in TR]); Tg = np.concatenate([d[1] for d in TR], 1)
def ctxkey(T, k):
    ok = (T[1:k+1] >= 0).all(0); ctx = np.zeros(T.shape[1], np.int64)
    for j in range(1, k+1): ctx = ctx*V + (np.maximum(T[j], -1)+1)
    return ctx, ok
def lookup(u, keys):
    i = np.clip(np.searchsorted(u, keys), 0, len(u)-1); return i, u[i]==keys
feats = {f: np.zeros((len(data[f][2]), K, 4)) for f in train+evals}  # per order: C, N(s), M1, M2 (LOO)
feat_s_is_t1 = {f: np.zeros((len(data[f][2]), K), bool) for f in train+evals}
for k in range(1, K+1):
    ctx, ok = ctxkey(Tg, k)
    cu, cinv, cc = np.unique(ctx[ok], return_inverse=True, return_counts=True)
    pkey = cinv.astype(np.int64)*V + Tg[0][ok]
    pu, pinv, pc = np.unique(pkey, return_inverse=True, return_counts=True)
    pctx = pu // V; ptok = pu % V
    # top-3 per context
    order = np.lexsort((-pc, pctx)); first = np.r_[True, pctx[order][1:] != pctx[order][:-1]]
    rankin = np.zeros(len(pu), np.int64)
    grp_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    rankin[order] = np.arange(len(order)) - grp_start
    top = np.full((len(cu), 3), -1, np.int64)
    for r in range(3):
        sel = order[rankin[order]==r]; top[pctx[sel], r] = ptok[sel]
    # local (example) counts for training rows
    exok = EXg[ok]
    lc_key = exok * (1<<22) + cinv
    lcu, lcc = np.unique(lc_key, return_counts=True)
    lp_key = (exok * (1<<22) + cinv) * V + Tg[0][ok]
    lpu, lpc = np.unique(lp_key, return_counts=True)
    def pair_count(cidx, tok):
        key = cidx*V + tok; i, h = lookup(pu, key); return np.where(h & (tok>=0), pc[i], 0)
    for f in train+evals:
        exf, T, s1 = data[f]
        c, okf = ctxkey(T, k)
        ci, hit = lookup(cu, c); hit &= okf
        C = np.where(hit, cc[ci], 0)
        loo = f in train
        def local_c():
            i, h = lookup(lcu, exf*(1<<22)+ci); return np.where(hit & h, lcc[i], 0)
        def local_p(tok):
            i, h = lookup(lpu, (exf*(1<<22)+ci)*V + tok); return np.where(hit & h & (tok>=0), lpc[i], 0)
        if loo: C = C - local_c()
        cand = [np.where(hit, top[ci, r], -1) for r in range(3)]
        cnt = [np.where(hit & (cand[r]>=0), pair_count(ci, cand[r]) - (local_p(cand[r]) if loo else 0), 0) for r in range(3)]
        cnt = np.stack(cnt, 1); cand = np.stack(cand, 1)
        o = np.argsort(-cnt*1024 + np.where(cand>=0, cand, 1023), axis=1, kind='stable')
        cs = np.take_along_axis(cnt, o, 1); ts = np.take_along_axis(cand, o, 1)
        Ns = np.where(hit, pair_count(ci, s1) - (local_p(s1) if loo else 0), 0)
        in_top2 = ((ts[:,0]==s1) & (cs[:,0]>0)) | ((ts[:,1]==s1) & (cs[:,1]>0))
        feats[f][:, k-1] = np.stack([C, np.where(in_top2, Ns, 0), cs[:,0], cs[:,1]], 1)
        feat_s_is_t1[f][:, k-1] = (ts[:,0]==s1) & (cs[:,0]>0)
    print('order', k, time.time()-t0)
np.savez('/tmp/an/ngraw'+SUF+'.npz', **{f.strip('/').split('/')[-1]+'_F': feats[f] for f in train+evals}, **{f.strip('/').split('/')[-1]+'_S': feat_s_is_t1[f] for f in train+evals})
