#!/bin/sh
# ab_bench.sh: `vil bench` of two builds in one call, alternated, for a refactor's "no change in
# speed" check (issue 31's cases: 224 px batch 256 for ViL-Tiny, ViL-Small and ViM-Tiny, and
# ViL-Tiny at 1024 px batch 32 and 2048 px batch 8, training and inference images/s).
#   sh dev/cuda/ab_bench.sh BASE_BIN NEW_BIN [ROUNDS]     (default 2 rounds: base, new, base, new)
# One line per run: round, build, case, train img/s, inference img/s. Full output goes to $OUT.
set -u
BASE=$1 NEW=$2 ROUNDS=${3:-2}
OUT=${OUT:-out}
mkdir -p "$OUT"
run() { # BIN LABEL CASE ARGS...
    bin=$1 label=$2 case=$3; shift 3
    log="$OUT/ab_${label}_${case}_$r.log"
    "$bin" bench --device cuda --steps 10 --no-profile "$@" > "$log" 2>&1 || { echo "$label $case: failed (rc $?)"; tail -3 "$log"; return; }
    # the size table: size tokens batch train-img/s infer-img/s ...
    awk -v r="$r" -v l="$label" -v c="$case" '$1 ~ /^[0-9]+$/ && NF >= 5 && $3 ~ /^[0-9]+$/ {
        printf "round %s %-5s %-18s %5s px b%-4s train %9s  infer %9s\n", r, l, c, $1, $3, $4, $5 }' "$log"
}
r=1
while [ $r -le "$ROUNDS" ]; do
    for side in base new; do
        bin=$BASE; [ $side = new ] && bin=$NEW
        run "$bin" $side vil_tiny --model configs/vil_tiny.cfg --img-size 224 --batch 256
        run "$bin" $side vil_small --model configs/vil_small.cfg --img-size 224 --batch 256
        run "$bin" $side vim_tiny --model configs/vil_tiny.cfg --set arch=vim --img-size 224 --batch 256
        run "$bin" $side vil_tiny_1024 --model configs/vil_tiny.cfg --img-size 1024 --batch 32
        run "$bin" $side vil_tiny_2048 --model configs/vil_tiny.cfg --img-size 2048 --batch 8
    done
    r=$((r + 1))
done
