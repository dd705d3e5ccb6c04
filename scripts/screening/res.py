from load import *
import collections
ev = load('/tmp/lev/eval', '/tmp/q3/q8k1.gguf', '/tmp/an/eval_q8k1.npz')
un = load('/tmp/r3/unseen', '/tmp/q3/q8k1.gguf', '/tmp/an/unseen_q8k1.npz')
m = tr.Model(SLM)
pieces = [m.vocab.token_to_piece(i) for i in range(512)]
def prep(d):
    g = d['llm_p_top1'] - d['llm_p_slm_top1']
    real = (d['llm_top1']==d['truth']).astype(float) - (d['slm_top1']==d['truth'])
    # score bins -> E[g|score]
    qs = np.quantile(d['score'], np.linspace(0,1,101))
    b = np.clip(np.searchsorted(qs, d['score'], side='right')-1, 0, 99)
    bm = np.bincount(b, g, 100)/np.maximum(np.bincount(b, None, 100),1)
    d['g'], d['real'], d['res'], d['fit'] = g, real, g - bm[b], bm[b]
    ex, pos, truth = d['example'], d['position'], d['truth']
    n = len(g)
    x = np.full(n, 1); x2 = np.full(n, -1)  # BOS id 1
    same = np.r_[False, (ex[1:]==ex[:-1]) & (pos[1:]==pos[:-1]+1)]
    x[same] = truth[np.r_[same[1:], False]]
    same2 = np.r_[False, False, same[2:] & same[1:-1]]
    x2[same2] = truth[np.r_[same2[2:], False, False]]
    d['x'], d['x2'] = x, x2
    # sentence position: positions since last '.' in sequence
    sent = np.zeros(n, int); cnt_top1 = np.zeros(n, int); topin = np.zeros(n, bool)
    seen = collections.Counter(); last = 0
    for i in range(n):
        if not same[i]:
            seen = collections.Counter(); last = pos[i]-1
        xi = x[i]; seen[xi] += 1
        if pieces[xi].strip() in ('.', '!', '?'): last = pos[i]-1
        sent[i] = pos[i]-1-last
        cnt_top1[i] = seen[d['slm_top1'][i]]
    d['sent'], d['cnt_top1'] = sent, cnt_top1
    return d
ev, un = prep(ev), prep(un)
def share(d, score_fn_rank, shares=(0.1,0.2)):
    out=[]
    n=len(d['g'])
    for s in shares:
        k=round(s*n); idx=np.argsort(-score_fn_rank, kind='stable')[:k]
        out.append(d['real'][idx].sum()/d['real'].sum()*100)  # not exactly gap closed but proportional
    return out
bound_ev = share(ev, ev['g']); base_ev = share(ev, ev['fit'])
print('eval bound', bound_ev, 'router', base_ev)
def keyed(d, name):
    if name=='x': return d['x']
    if name=='top1': return d['slm_top1']
    if name=='x,top1': return d['x']*512 + d['slm_top1']
    if name=='x2,x': return (d['x2']+1)*512 + d['x']
    if name=='x2,x,top1': return ((d['x2']+1)*512 + d['x'])*512 + d['slm_top1']
    if name=='sent': return np.minimum(d['sent'], 30)
    if name=='pos': return np.minimum(d['position']//8, 40)
    if name=='cnt_top1': return np.minimum(d['cnt_top1'], 10)
    if name=='top1==x': return (d['slm_top1']==d['x']).astype(int)
for name in ['x','top1','x,top1','x2,x','x2,x,top1','sent','pos','cnt_top1','top1==x']:
    for fit, app, lab in ((un, ev, 'un->ev'), (ev, un, 'ev->un')):
        kf = keyed(fit, name); ka = keyed(app, name)
        u, inv = np.unique(kf, return_inverse=True)
        s = np.bincount(inv, fit['res']); c = np.bincount(inv)
        prior = 20.0
        mean = s/(c+prior)   # shrunk to 0
        pos_ = np.searchsorted(u, ka); pos_ = np.clip(pos_, 0, len(u)-1)
        hit = u[pos_]==ka
        adj = np.where(hit, mean[pos_], 0.0)
        r2 = 1 - ((app['res']-adj)**2).sum()/(app['res']**2).sum()
        print('%-10s %s  R2 of residual %.4f  share %s (base %s)' % (name, lab, r2, ['%.1f'%v for v in share(app, app['fit']+adj)], ['%.1f'%v for v in share(app, app['fit'])]))
