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
#   fixres  the bases post-trained 500 steps at 56 and at 112 px without an intervention (ViL)
#   sets2   every post-training on the sets that decide (the test at 28 and 112 px, canvas112_zero
#           and _noise, tile4, shrink, zoom2), the FixRes runs on the upsampled test
#   pack    every evaluation's per-image outcomes into OUT/PACK (dev/length/pack.py)
# Environment: DATA (default .data/fmnist), DEADLINE (epoch seconds: a stage started later is not
# run, one running is cut at it; default none), JOBS (evaluations at once, default 12), PARALLEL
# (trainings at once per arch, default 5), PACK (default gpu.pack.json.gz), ARCHS (default
# "vil vim"). Then, where the packs are: python3 dev/length/report.py OUT.
set -eu
STAGE=${1:?stage: bases, sets1, posts, ablate, fixres, sets2 or pack}
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
fixres) EXTRA="--set reprob=0" FIXRES_SIZES="56 112" cut sh dev/length/run.sh fixres vil "$OUT" ;;
sets2)
    for a in $ARCHS; do
        VARIANTS="$POSTS" ONLY="test canvas112_zero canvas112_noise tile4 shrink zoom2" SIDES=4 cut sh dev/length/sets.sh "$a" "$OUT"
    done
    VARIANTS="fixres56_zero fixres112_zero" ONLY=test SIDES="2 4" POS=interp cut sh dev/length/sets.sh vil "$OUT" ;;
pack) python3 dev/length/pack.py "$OUT" "$OUT/${PACK:-gpu.pack.json.gz}" ;;
*) echo "gpu.sh: unknown stage $STAGE" >&2; exit 2 ;;
esac
