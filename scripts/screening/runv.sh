#!/bin/bash
# runv.sh VAR MINC SEED [train args]
V=$1; M=$2; S=$3; shift 3
W=$(/usr/bin/python3 /tmp/an/mkvar.py $V $M)
D=/tmp/ngv_${V}_$M$SUF
export TOKROUTE_EXTRA=$W DATA=$D/train,$D/s1,$D/s2,$D/s3,$D/s4 EVAL=$D/eval UNSEEN=$D/unseen
./run.sh v_${V}_${M}${SUF}_s$S $S "$@"
