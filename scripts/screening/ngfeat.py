from load import *
import pickle
exec(open('ngram.py').read().split("K=6")[0].split("t0=time.time()")[1].replace("import time",""))
V=512; K=6
tables = pickle.load(open('/tmp/an/ngram_tables.pkl','rb'))
def feats(folder, d):
    T = ctx_tokens(*seqs(folder), K)
    s1 = d['slm_top1'].astype(np.int64); n=len(s1)
    F = {}
    for k in range(1, K+1):
        cu, cc, pu, pc, mx = tables[k]
        ok = (T[1:k+1] >= 0).all(0)
        ctx = np.zeros(n, np.int64)
        for j in range(1, k+1): ctx = ctx*(V+1) + (np.maximum(T[j],-1)+1)
        i = np.clip(np.searchsorted(cu, ctx), 0, len(cu)-1); hit = ok & (cu[i]==ctx)
        C = np.where(hit, cc[i], 0); M = np.where(hit, mx[i], 0)
        key = ctx*V + s1; j2 = np.clip(np.searchsorted(pu, key), 0, len(pu)-1); h2 = hit & (pu[j2]==key)
        N = np.where(h2, pc[j2], 0)
        F[k] = (C, N, M)
    return F
def design(d, F, minc=2):
    n = len(d['slm_top1'])
    # backoff: highest order with C>=minc
    ps = np.zeros(n); pm = np.zeros(n); lc = np.zeros(n); order = np.zeros(n)
    for k in range(1, K+1):
        C, N, M = F[k]
        use = C >= minc
        ps[use] = N[use]/C[use]; pm[use] = M[use]/C[use]; lc[use] = np.log1p(C[use]); order[use]=k
    cols = [ps, pm, pm-ps, lc, order/K, (pm-ps)*(pm>0.5)]
    for k in (2,3,4,5):
        C,N,M = F[k]; cols += [np.where(C>0, (M-N)/np.maximum(C,1), 0), np.log1p(C)]
    return np.stack(cols, 1)
def prep(d):
    g = d['llm_p_top1'] - d['llm_p_slm_top1']
    real = (d['llm_top1']==d['truth']).astype(float) - (d['slm_top1']==d['truth'])
    qs = np.quantile(d['score'], np.linspace(0,1,101)); b = np.clip(np.searchsorted(qs, d['score'], side='right')-1, 0, 99)
    bm = np.bincount(b, g, 100)/np.maximum(np.bincount(b, None, 100),1)
    d['g'], d['real'], d['fit'], d['b'] = g, real, bm[b], b
    return d
ev = prep(load('/tmp/lev/eval', '/tmp/q3/q8k1.gguf', '/tmp/an/eval_q8k1.npz'))
un = prep(load('/tmp/r3/unseen', '/tmp/q3/q8k1.gguf', '/tmp/an/unseen_q8k1.npz'))
Xe = design(ev, feats('/tmp/lev/eval', ev)); Xu = design(un, feats('/tmp/r3/unseen', un))
np.save('/tmp/an/Xe.npy', Xe); np.save('/tmp/an/Xu.npy', Xu)
def share(d, s):
    out=[]
    for sh in (0.1, 0.2):
        k=round(sh*len(s)); idx=np.argsort(-s, kind='stable')[:k]; out.append('%.1f' % (d['real'][idx].sum()/d['real'].sum()*100))
    return out
print('bound ev', share(ev, ev['g']), 'un', share(un, un['g']))
print('router ev', share(ev, ev['fit']), 'un', share(un, un['fit']))
# residual regression with interactions with router-fit bins
def basis(d, X):
    f = d['fit'][:,None]
    return np.concatenate([np.ones((len(f),1)), f, f**2, X, X*f], 1)
for fit, app, lab in ((un, ev, 'un->ev'), (ev, un, 'ev->un')):
    Xf = Xu if fit is un else Xe; Xa = Xe if app is ev else Xu
    A = basis(fit, Xf); w = np.linalg.lstsq(A, fit['g'], rcond=None)[0]
    A0 = basis(fit, Xf[:, :0]); w0 = np.linalg.lstsq(A0, fit['g'], rcond=None)[0]
    pa = basis(app, Xa) @ w; pa0 = basis(app, Xa[:, :0]) @ w0
    print(lab, 'with ngram', share(app, pa), 'without', share(app, pa0))
