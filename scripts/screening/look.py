from load import *
ev = load('/tmp/lev/eval', '/tmp/q3/q8k1.gguf', '/tmp/an/eval_q8k1.npz')
m = tr.Model(SLM)
P = [(lambda s: s.decode("utf-8","replace") if isinstance(s,bytes) else s)(m.vocab.token_to_piece(i)) for i in range(512)]
g = ev['llm_p_top1'] - ev['llm_p_slm_top1']
n=len(g); k=round(0.1*n)
B = set(np.argsort(-g, kind='stable')[:k]); R = set(np.argsort(ev['score'], kind='stable')[:k])
miss = sorted(B-R, key=lambda i: -g[i])
rng = np.random.default_rng(0)
pick = rng.choice(miss, 25, replace=False)
rank = np.empty(n); rank[np.argsort(ev['score'], kind='stable')] = np.arange(n)/n
for i in sorted(pick):
    e = ev['example'][i]; p = ev['position'][i]
    lo = max(0, i-40)
    ctx = ''.join(P[ev['truth'][j]] for j in range(lo, i) if ev['example'][j]==e)
    print('g=%.2f rank=%.2f maxp=%.2f | ...%s [[SLM:%r LLM:%r(%.2f) truth:%r]]' % (g[i], rank[i], ev['maxprob'][i], ctx[-160:].replace('\n',' '), P[ev['slm_top1'][i]], P[ev['llm_top1'][i]], ev['llm_p_top1'][i], P[ev['truth'][i]]))
