#!/bin/bash
# usage: run.sh NAME SEED [extra train args]   (env TOKROUTE_EXTRA, DATA set by caller)
N=$1; S=$2; shift 2
/usr/bin/time -f "wall %e s cpu %U" ./tr_ng train-router --data $DATA --eval-data $EVAL --routed 0.1,0.2 --seed $S -t ${T:-2} --out $N.gguf "$@" > $N.txt 2>&1
for r in 0.1 0.2; do ./tr_ng calibrate --router $N.gguf --data $UNSEEN --target-routed $r --gap > ${N}_unseen$r.txt 2>&1; done
