#!/bin/sh
# dev/length/cpu.sh: issue 49's one-factor sets at the scale of a 2-core CPU (README "Length apart
# from scale"): ViL bases under the demo's recipe (configs/vil_fashion.cfg, 2,000 steps of 64:
# tools/demo.sh), 5 seeds; their sets; the zero-start and fitted-noise post-trainings of seeds 0-2
# (500 steps at a tenth of the lr) and their sets; ViL trained on 56-px canvases (1,000 steps of
# 64, CANVAS_SEEDS; one without a position embedding), post-trained 300 steps (zero, fitted); and the readout distances of `vil states --readout-ref` (seeds 0-2). About
# 2 hours of this machine's 2 cores; then python3 dev/length/report.py OUT.
#   sh dev/length/cpu.sh [OUT]
set -eu
OUT=${1:-out/length_cpu}
export DATA=${DATA:-/usr/share/datasets/fashion-mnist} DEVICE=cpu VIL=${VIL:-bin/vil} OMP_NUM_THREADS=1
mkdir -p "$OUT"
# the demo's recipe as a config, so that the post-trainings' "tenth of the lr" is a tenth of its lr
CFG=$OUT/vil_fashion_demo.cfg
sed -e 's/^base_lr .*/base_lr           = 0.024/' -e 's/^batch .*/batch             = 64/' \
    -e 's/^ema_decay .*/ema_decay         = 0.99/' configs/vil_fashion.cfg > "$CFG"
export CFG EPOCHS=3 SEEDS="0 1 2 3 4"
EXTRA="--set max_steps=2000 --set warmup_epochs=0.1 --set reprob=0 --set workers=1" sh dev/length/run.sh base vil "$OUT"
export LENGTH_SETS=${LENGTH_SETS:-build/tools/length_sets} LIMIT=1000 JOBS=2 BATCH=250
ONLY="test canvas56_zero canvas112_zero" SIDES="2 4" POS="interp keep" sh dev/length/sets.sh vil "$OUT"
ONLY="tile2 tile4 shrink zoom2" POS="keep" sh dev/length/sets.sh vil "$OUT"
SEEDS="0 1 2" INTERVENTIONS="zero fitted" PARALLEL=3 EXTRA="--set reprob=0" sh dev/length/run.sh post vil "$OUT"
VARIANTS="post_zero post_fitted" ONLY="test canvas56_zero canvas112_zero" SIDES="4" POS="interp keep" sh dev/length/sets.sh vil "$OUT"
VARIANTS="post_zero post_fitted" ONLY="tile4" POS="keep" sh dev/length/sets.sh vil "$OUT"
# trained on canvases: each item unscaled at a random position on 56 px (the class token must find it)
for s in ${CANVAS_SEEDS:-0 1}; do
    d=$OUT/vil/canvas_s$s
    [ -f "$d/last.safetensors" ] || "$VIL" train --config "$CFG" --data "$DATA" --device cpu --out "$d" --quiet \
        --set canvas=56 --set img_size=56 --set canvas_bg=zero --set scale_min=1.0 --set seed=$s --set max_steps=1000 \
        --set epochs=2 --set warmup_epochs=0.1 --set reprob=0 --set workers=1 --set eval_every_epochs=0 > "$d.log" 2>&1
done
# the same without a position embedding (its only notion of position is the scan), one seed
d=$OUT/vil/canvasnopos_s0
[ -f "$d/last.safetensors" ] || "$VIL" train --config "$CFG" --data "$DATA" --device cpu --out "$d" --quiet \
    --set canvas=56 --set img_size=56 --set canvas_bg=zero --set scale_min=1.0 --set seed=0 --set pos_embed=none \
    --set max_steps=1000 --set epochs=2 --set warmup_epochs=0.1 --set reprob=0 --set workers=1 --set eval_every_epochs=0 > "$d.log" 2>&1
# the canvas models post-trained 300 steps at a tenth of the lr: zero start (the control), fitted noise
for s in ${CANVAS_SEEDS:-0 1}; do
    for i in zero fitted; do
        d=$OUT/vil/canvaspost_${i}_s$s
        [ -f "$d/last.safetensors" ] || "$VIL" train --config "$CFG" --data "$DATA" --device cpu --out "$d" --quiet \
            --init "$OUT/vil/canvas_s$s/last.safetensors" --set canvas=56 --set img_size=56 --set canvas_bg=zero \
            --set scale_min=1.0 --set seed=$s --set init_state=$i --set base_lr=0.0024 --set warmup_epochs=0 \
            --set max_steps=300 --set epochs=1 --set reprob=0 --set workers=1 --set eval_every_epochs=0 > "$d.log" 2>&1 &
    done
done
wait
VARIANTS="canvas canvasnopos canvaspost_zero canvaspost_fitted" ONLY="canvas56_zero canvas84_zero canvas112_zero tile2 tile4" \
    POS="keep" sh dev/length/sets.sh vil "$OUT"
VARIANTS="canvas" ONLY="canvas84_zero canvas112_zero tile2 tile4" POS="interp" sh dev/length/sets.sh vil "$OUT"
# the readout: a reference at 28 px, then each condition against it
S=$OUT/sets
for v in base post_zero post_fitted; do
    for s in 0 1 2; do
        m=$OUT/vil/${v}_s$s/last.safetensors
        r=$OUT/vil/states/${v}_s$s
        mkdir -p "$r"
        [ -f "$r/ref28/readout.safetensors" ] || "$VIL" states --model "$m" --data "$DATA" --device cpu --limit 256 \
            --batch 32 --crop-pct 1 --workers 1 --out "$r/ref28" > "$r/ref28.log" 2>&1
        for c in "test56 $DATA 56" "test112 $DATA 112" "canvas112_zero $S/canvas112_zero 112" "tile4 $S/tile4 112"; do
            set -- $c
            [ -f "$r/$1/states.json" ] || "$VIL" states --model "$m" --data "$2" --img-size "$3" --device cpu --limit 256 \
                --batch 32 --crop-pct 1 --workers 1 --readout-ref "$r/ref28/readout.safetensors" --out "$r/$1" > "$r/$1.log" 2>&1
        done
    done
done
echo "cpu.sh: done; python3 dev/length/report.py $OUT; python3 dev/length/states_report.py $OUT"
