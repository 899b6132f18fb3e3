#!/bin/sh
# dev/length/gpu.sh: dev/length/cpu.sh's protocol on one GPU (issue 49, README "Beyond the training
# length"): models of the demo's recipe (configs/vil_fashion.cfg, 2,000 steps of 64), ViL and ViM,
# 5 seeds in every cell, evaluated on all 10,000 test images. What the 2-core machine could not
# run: ViM on the one-factor sets, the noise and passing post-trainings on them, the fitted-noise
# ablations each alone, the 100-step budget with every intervention, and the FixRes ceiling.
#   sh dev/length/gpu.sh STAGE [OUT]
# STAGE, in the order they are run (each skips what its folder already holds, so a stage cut short
# by DEADLINE is finished by running it again):
#   bases   ViL and ViM, seeds 0-4, all 10 at once
#   sets1   the bases on every one-factor set at 2-4x the side, --pos interp and keep
#   posts   zero (the control), noise, fitted, passing: 500 steps at a tenth of the lr, both archs
#   ablate  fitscalar, fitmean, fitdrop, fitpaper (500 steps); zero, fitted, passing at 100 steps (ViL)
#   fixres  the bases post-trained 500 steps at 56 and at 112 px without an intervention
#   sets2   every post-training on the sets that decide (the test at 28 and 112 px, canvas112_zero
#           and _noise, tile4, shrink, zoom2), the FixRes runs on the upsampled test
#   canvas  trained on 56-px canvases, items unscaled at random places (1,000 steps), with and without
#           a position embedding, both archs
#   sets3   the canvas models on canvases and tiles up to 112 px
#   readout the readout distances (vil states --readout-ref) of the bases and post_zero / post_fitted
#   pack    every evaluation's per-image outcomes into OUT/PACK (dev/length/pack.py)
# On the lent machine (no libstb-dev, libcjson-dev or Fashion-MNIST there; DEVELOPERS.md): carry
# .deps holding the .debs and the data (.deps/fmnist), and begin with `. tools/gpu_env.sh; make -j16
# CUDA_ARCH="-gencode arch=compute_90,code=sm_90" bin/vil build/lib/libvil-cuda.so build/tools/length_sets`.
# The whole protocol took 27 minutes there (H200, 2026-11-29), the pack stage ~70 s of it.
# Environment: DATA (default .data/fmnist), DEADLINE (epoch seconds: a stage started later is not
# run, one running is cut at it; default none), JOBS (evaluations at once, default 12), PARALLEL
# (trainings at once per arch, default 5), PACK (default gpu.pack.json.gz), ARCHS (default
# "vil vim"). Then, where the packs are: python3 dev/length/report.py OUT.
set -eu
STAGE=${1:?stage: bases, sets1, posts, ablate, fixres, sets2, canvas, sets3, readout or pack}
OUT=${2:-out/length_gpu}
export DATA=${DATA:-.data/fmnist} DEVICE=${DEVICE:-cuda} EPOCHS=3 SEEDS="0 1 2 3 4" PARALLEL=${PARALLEL:-5}
export JOBS=${JOBS:-12} BATCH=${BATCH:-1000} LIMIT=0
ARCHS=${ARCHS:-vil vim}
mkdir -p "$OUT"
# the demo's recipe as a config (as cpu.sh), so that the post-trainings' "tenth of the lr" is a tenth of its lr
export CFG=$OUT/vil_fashion_demo.cfg
sed -e 's/^base_lr .*/base_lr           = 0.024/' -e 's/^batch .*/batch             = 64/' \
    -e 's/^ema_decay .*/ema_decay         = 0.99/' configs/vil_fashion.cfg > "$CFG"

# cut CMD...: CMD, cut at DEADLINE; a stage begun after it is skipped
cut() {
    [ -n "${DEADLINE:-}" ] || { "$@"; return; }
    left=$((DEADLINE - $(date +%s)))
    [ "$left" -gt 5 ] || { echo "gpu.sh: past the deadline, not run: $*"; return 0; }
    timeout "$left" "$@" || echo "gpu.sh: cut at the deadline or failed ($?): $*"
}

# both archs at once
each_arch() {
    for a in $ARCHS; do "$@" "$a" & done
    wait
}

base() { EXTRA="--set max_steps=2000 --set warmup_epochs=0.1 --set reprob=0 --set workers=1" cut sh dev/length/run.sh base "$1" "$OUT"; }
fixres() { cut sh dev/length/run.sh fixres "$1" "$OUT"; }
posts() { INTERVENTIONS="zero noise fitted passing" EXTRA="--set reprob=0" cut sh dev/length/run.sh post "$1" "$OUT"; }
POSTS="post_zero post_noise post_fitted post_passing post_fitscalar post_fitmean post_fitdrop post_fitpaper post100_zero post100_fitted post100_passing"

case $STAGE in
bases) each_arch base ;;
sets1)
    for a in $ARCHS; do
        VARIANTS=base ONLY="test canvas56_zero canvas84_zero canvas112_zero canvas112_noise tile2 tile3 tile4 shrink zoom2" \
            SIDES="2 3 4" cut sh dev/length/sets.sh "$a" "$OUT"
    done ;;
posts) each_arch posts ;;
ablate)
    export EXTRA="--set reprob=0"
    INTERVENTIONS="fitscalar fitmean fitdrop fitpaper" cut sh dev/length/run.sh post vil "$OUT"
    INTERVENTIONS="zero fitted passing" POST_TAG=post100 POST_STEPS=100 cut sh dev/length/run.sh post vil "$OUT" ;;
fixres) EXTRA="--set reprob=0" FIXRES_SIZES="56 112" each_arch fixres ;;
sets2)
    for a in $ARCHS; do
        VARIANTS="$POSTS" ONLY="test canvas112_zero canvas112_noise tile4 shrink zoom2" SIDES=4 cut sh dev/length/sets.sh "$a" "$OUT"
    done
    for a in $ARCHS; do
        VARIANTS="fixres56_zero fixres112_zero" ONLY=test SIDES="2 4" POS=interp cut sh dev/length/sets.sh "$a" "$OUT"
    done ;;
canvas) # trained on 56-px canvases (cpu.sh's canvas runs): with and without a position embedding, both archs
    for a in $ARCHS; do
        for v in canvas canvasnopos; do
            [ $v = canvas ] && k="" || k="--set pos_embed=none"
            for s in $SEEDS; do
                d=$OUT/$a/${v}_s$s
                [ -f "$d/last.safetensors" ] && continue
                rm -rf "$d"
                cut bin/vil train --config "$CFG" --data "$DATA" --device "$DEVICE" --out "$d" --quiet --set arch=$a \
                    --set canvas=56 --set img_size=56 --set canvas_bg=zero --set scale_min=1.0 --set seed=$s $k \
                    --set max_steps=1000 --set epochs=2 --set warmup_epochs=0.1 --set reprob=0 --set workers=1 \
                    --set eval_every_epochs=0 > "$d.log" 2>&1 &
            done
        done
    done
    wait ;;
sets3)
    for a in $ARCHS; do
        VARIANTS="canvas canvasnopos" ONLY="canvas56_zero canvas84_zero canvas112_zero canvas112_noise tile2 tile4" \
            cut sh dev/length/sets.sh "$a" "$OUT"
    done ;;
readout) # vil states --readout-ref (cpu.sh's readout) of every base and post_zero / post_fitted; seed 0's
    # bases also on the CPU into OUT/ARCH/states_cpu, the CUDA path's check
    S=$OUT/sets
    for a in $ARCHS; do
        for v in base post_zero post_fitted; do
            for s in $SEEDS; do
                devs=$DEVICE
                [ "$v$s" = base0 ] && devs="$DEVICE cpu"
                for dv in $devs; do
                    m=$OUT/$a/${v}_s$s/last.safetensors r=$OUT/$a/states/${v}_s$s
                    [ $dv = cpu ] && r=$OUT/$a/states_cpu/${v}_s$s
                    mkdir -p "$r"
                    [ -f "$r/ref28/readout.safetensors" ] || cut bin/vil states --model "$m" --data "$DATA" --device $dv \
                        --limit 256 --batch 64 --crop-pct 1 --out "$r/ref28" > "$r/ref28.log" 2>&1
                    for c in "test56 $DATA 56" "test112 $DATA 112" "canvas112_zero $S/canvas112_zero 112" "tile4 $S/tile4 112"; do
                        set -- $c
                        [ -f "$r/$1/states.json" ] || cut bin/vil states --model "$m" --data "$2" --img-size "$3" --device $dv \
                            --limit 256 --batch 64 --crop-pct 1 --readout-ref "$r/ref28/readout.safetensors" --out "$r/$1" \
                            > "$r/$1.log" 2>&1
                    done
                done &
            done
            wait
        done
    done ;;
pack) python3 dev/length/pack.py "$OUT" "$OUT/${PACK:-gpu.pack.json.gz}" ;;
*) echo "gpu.sh: unknown stage $STAGE" >&2; exit 2 ;;
esac
