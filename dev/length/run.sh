#!/bin/sh
# dev/length/run.sh: the length-generalization experiment of issue 32 (README "Beyond the
# training length"): Fashion-MNIST models trained at 28 px under configs/vil_fashion_long.cfg,
# evaluated at 28 / 56 / 84 / 112 px (the test images upsampled), with the initial-state
# interventions of doc/recipe.md ("Initial states") as 500-step post-trainings at a tenth of the
# learning rate (zero: the same post-training without an intervention, the control), and state
# passing also from scratch.
#   sh dev/length/run.sh STAGE ARCH [OUT]
# STAGE: base (3 seeds in parallel), post (each intervention x seed), scratch (passing from
# scratch), fixres (the base post-trained without an intervention at each of FIXRES_SIZES, the
# ceiling of the upsampled test), eval (vil compare of every checkpoint at every size), states
# (vil states of seed 0), all (base, post, scratch, eval, states in turn). ARCH: vil or vim. OUT:
# the results' folder (default out/length). dev/length/sets.sh evaluates the same checkpoints
# on the one-factor test sets of issue 49, with per-image predictions.
# A run whose last.safetensors exists is not run again. Environment: DATA (the Fashion-MNIST IDX
# folder, default /usr/share/datasets/fashion-mnist), EPOCHS (of the 100 of the recipe; default
# 100), SEEDS (default "0 1 2"), SIGMA (noise's standard deviation; default: the RMS of a
# final-state element of the seed-0 baseline at 28 px, from vil states), DEVICE (default auto),
# EXTRA (more flags for every run, before the stage's own), LIMIT (test images each evaluation
# reads, spread over the classes; default 0: all), CFG (default configs/vil_fashion_long.cfg),
# POST_STEPS (default 500), POST_TAG (post, fixres: the runs' prefix, default post: post_<i>_s<seed>;
# e.g. post100 for a 100-step budget beside the 500-step runs), INTERVENTIONS (post: default "zero
# noise fitted passing"; also fitscalar, fitmean, fitdrop and fitpaper, the fitted-noise ablations:
# doc/recipe.md "Initial states"), PARALLEL (post: runs at once, default one per seed),
# FIXRES_SIZES (default "56 112"), VARIANTS / TAG (eval: the variants evaluated, a suffix of the
# compare folder), STATE_VARIANTS, STATE_IMAGES (vil states: the variants and its --limit).
set -eu
STAGE=${1:?stage: base, post, scratch, eval, states or all}
ARCH=${2:?arch: vil or vim}
OUT=${3:-out/length}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
EPOCHS=${EPOCHS:-100}
SEEDS=${SEEDS:-0 1 2}
DEVICE=${DEVICE:-auto}
VIL=${VIL:-bin/vil}
CFG=${CFG:-configs/vil_fashion_long.cfg}
POST_STEPS=${POST_STEPS:-500}
SIZES=28,56,84,112
R=$OUT/$ARCH
mkdir -p "$R"

# train NAME [--set ...]: one run into R/NAME, its log beside it; skipped when done
train() {
    name=$1
    shift
    [ -f "$R/$name/last.safetensors" ] && return 0
    rm -rf "${R:?}/$name"
    "$VIL" train --config $CFG --data "$DATA" --out "$R/$name" --device "$DEVICE" --set arch="$ARCH" \
        --set name="${ARCH}_$name" --set epochs="$EPOCHS" --set eval_every_epochs=0 --quiet ${EXTRA:-} "$@" \
        > "$R/$name.log" 2>&1 || { echo "run $name failed:"; tail -5 "$R/$name.log"; return 1; }
}

# noise's sigma: the RMS of one final-state element of the seed-0 baseline at 28 px
sigma() {
    if [ -n "${SIGMA:-}" ]; then echo "$SIGMA"; return; fi
    [ -f "$R/states_base_28/states.json" ] || "$VIL" states --model "$R/base_s0/last.safetensors" --data "$DATA" \
        --img-size 28 --device "$DEVICE" --limit "${STATE_IMAGES:-256}" --out "$R/states_base_28" > "$R/states_base_28.log" 2>&1
    python3 - "$R/states_base_28/states.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
# the RMS of one state element: the final norms' mean square over layers and directions, per element
ms = sum(l["final_mean"] ** 2 + l["final_sd"] ** 2 for l in j["layers"]) / len(j["layers"])
print("%.4g" % (ms / (j["d_state"] * j["d_inner"])) ** 0.5)
PY
}

stage_base() {
    for s in $SEEDS; do train base_s$s --set seed=$s & done
    wait
}

# an intervention's keys: the four of the first round, then the fitted-noise ablations (issue 49):
# the paper's scalars per layer and direction with its moving average (beta 0.1 as the batch's
# weight), the fitted mean alone, 10% zero starts, and the three together (the paper's fit)
intervention() {
    case $1 in
    zero | noise | fitted | passing) echo "--set init_state=$1" ;;
    fitscalar) echo "--set init_state=fitted --set init_state_fit=scalar --set init_state_fit_momentum=0.9" ;;
    fitmean) echo "--set init_state=fitted --set init_state_fit_noise=0" ;;
    fitdrop) echo "--set init_state=fitted --set init_state_fit_drop=0.1" ;;
    fitpaper) echo "--set init_state=fitted --set init_state_fit=scalar --set init_state_fit_momentum=0.9 --set init_state_fit_drop=0.1" ;;
    *) echo "unknown intervention $1" >&2; return 1 ;;
    esac
}

# after a run started in the background: n counts those running; with PARALLEL of them, wait for
# them all (in this shell: a subshell cannot wait for them)
throttle() {
    n=$((n + 1))
    if [ -n "${PARALLEL:-}" ] && [ "$n" -ge "$PARALLEL" ]; then
        wait
        n=0
    fi
}

# a tenth of the recipe's base_lr (cosine over POST_STEPS, no warmup)
post_lr() { awk '$1 == "base_lr" { print $3 / 10 }' $CFG; }

stage_post() {
    sg=$(sigma)
    echo "$sg" > "$R/sigma.txt"
    lr=$(post_lr)
    tag=${POST_TAG:-post}
    for i in ${INTERVENTIONS:-zero noise fitted passing}; do
        keys=$(intervention "$i")
        n=0
        for s in $SEEDS; do
            train ${tag}_${i}_s$s --init "$R/base_s$s/last.safetensors" --set seed=$s $keys \
                --set init_state_sigma="$sg" --set base_lr="$lr" --set warmup_epochs=0 --set max_steps="$POST_STEPS" \
                --set workers=2 &
            throttle
        done
        wait
    done
}

# FixRes: the same post-training at the larger size, no intervention (the ceiling of the upsampled test)
stage_fixres() {
    lr=$(post_lr)
    for z in ${FIXRES_SIZES:-56 112}; do
        n=0
        for s in $SEEDS; do
            train fixres${z}_zero_s$s --init "$R/base_s$s/last.safetensors" --set seed=$s --set img_size=$z \
                --set base_lr="$lr" --set warmup_epochs=0 --set max_steps="$POST_STEPS" --set workers=2 &
            throttle
        done
        wait
    done
}

stage_scratch() {
    for s in $SEEDS; do train scratch_passing_s$s --set seed=$s --set init_state=passing & done
    wait
}

stage_eval() {
    models=""
    for v in ${VARIANTS:-base post_zero post_noise post_fitted post_passing scratch_passing}; do
        for s in $SEEDS; do
            [ -f "$R/${v}_s$s/last.safetensors" ] && models="$models $R/${v}_s$s/last.safetensors"
        done
    done
    "$VIL" compare --models $models --data "$DATA" --img-size $SIZES --batch 500 --steps 3 --limit "${LIMIT:-0}" \
        --device "$DEVICE" --out "$R/compare${TAG:-}" > "$R/compare${TAG:-}.log" 2>&1 || { tail -5 "$R/compare${TAG:-}.log"; return 1; }
}

stage_states() {
    for v in ${STATE_VARIANTS:-base post_passing scratch_passing post_noise}; do
        [ -f "$R/${v}_s0/last.safetensors" ] || continue
        "$VIL" states --model "$R/${v}_s0/last.safetensors" --data "$DATA" --img-size 112 --device "$DEVICE" \
            --limit "${STATE_IMAGES:-256}" \
            --out "$R/states_${v}_112" > "$R/states_${v}_112.log" 2>&1 || tail -5 "$R/states_${v}_112.log"
    done
}

case $STAGE in
base | post | scratch | fixres | eval | states) stage_$STAGE ;;
all) stage_base && stage_post && stage_scratch && stage_eval && stage_states ;;
*) echo "unknown stage $STAGE" >&2; exit 2 ;;
esac
