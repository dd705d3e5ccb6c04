# mkvar.py VARIANT MINC -> /tmp/ngv_VARIANT_MINC/<folder>/extra.f32 ; prints width
import sys, os, numpy as np
var, MINC = sys.argv[1], int(sys.argv[2]); K=6; SUF=os.environ.get('SUF','')
R = np.load('/tmp/an/ngraw'+SUF+'.npz'); R2 = np.load('/tmp/an/ngraw2'+SUF+'.npz') if var in ('llm','gain','all','gainc','gains') else None
src = {'train':'/tmp/lev/train','s1':'/tmp/r3/s1','s2':'/tmp/r3/s2','s3':'/tmp/r3/s3','s4':'/tmp/r3/s4','eval':'/tmp/lev/eval','unseen':'/tmp/r3/unseen'}
for name, f in src.items():
    F = R[name+'_F']; S = R[name+'_S']; n = len(F)
    found = np.zeros(n); ps = np.zeros(n); pm = np.zeros(n); st1 = np.zeros(n); lc = np.zeros(n); ordv = np.zeros(n); p2=np.zeros(n)
    per = []
    ext = np.zeros((n, 5))
    for k in range(1, K+1):
        C, N, M1, M2 = F[:, k-1].T
        use = C >= MINC
        found[use]=1; ps[use]=N[use]/C[use]; pm[use]=M1[use]/C[use]; st1[use]=S[use, k-1]; lc[use]=np.log1p(C[use]); ordv[use]=k/K; p2[use]=M2[use]/C[use]
        Cs = np.maximum(C, 1)
        if R2 is not None:
            C2, NL, ML, Gs, Css, Gss = R2[name][:, k-1].T
            ext[use] = np.stack([NL/np.maximum(C2,1), ML/np.maximum(C2,1), Gs/np.maximum(C2,1), np.where(Css>=1, Gss/np.maximum(Css,1), Gs/np.maximum(C2,1)), np.log1p(Css)],1)[use]
        per += [use.astype(float), np.where(use, N/Cs, 0), np.where(use, M1/Cs, 0), np.where(use, S[:, k-1], 0)]
    cols = [found, ps, pm, st1, lc, ordv]
    if var == 'perorder': cols += per
    if var == 'p2': cols += [p2]
    if var == 'llm': cols += [ext[:,0], ext[:,1]]
    if var == 'gain': cols += [ext[:,2], ext[:,3], ext[:,4]]
    if var == 'all': cols += list(ext.T)
    if var == 'gainc': cols += [ext[:,2]]
    if var == 'gains': cols += [ext[:,3], ext[:,4]]
    if var == 'perorder_p2': cols += per + [p2]
    X = np.stack(cols, 1).astype(np.float32)
    out = '/tmp/ngv_%s_%d%s/%s' % (var, MINC, SUF, name); os.makedirs(out, exist_ok=True)
    for fn in ('index.bin', 'positions.bin', 'tokens.bin'):
        if os.path.exists(f+'/'+fn) and not os.path.exists(out+'/'+fn): os.symlink(f+'/'+fn, out+'/'+fn)
    X.tofile(out + '/extra.f32')
print(X.shape[1])
