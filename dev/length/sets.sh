#!/bin/sh
# dev/length/sets.sh: evaluation only, for issue 49 (README "Beyond the training length"): every
# checkpoint of dev/length/run.sh's results folder (OUT/ARCH/<variant>_s<seed>/last.safetensors)
# on the test sets of tools/length_sets that change one factor at a time, each at its own side,
# with the position embedding moved both ways (--pos interp and keep), and on the test split
# itself at the training side and upsampled to 2, 3 and 4 times it (the first round's test, for
# comparison). Each evaluation writes its per-image predictions, so that dev/length/report.py
# pairs the intervals by image:
#   OUT/ARCH/sets/<set>.<side>/<pos>/<variant>_s<seed>.csv.gz   (vil eval --predictions-file, top-1)
#   OUT/ARCH/sets/<set>.<side>/<pos>/<variant>_s<seed>.json     (its --results-file)
# <set>: test (the split: at the training side the reference of the "flat" criterion, above it
# upsampled), canvas56_zero ... canvas112_noise, tile2 ... tile4, shrink, zoom2 (OUT/sets/sets.json
# lists them); at the training side the position embedding does not move and only interp runs.
#   sh dev/length/sets.sh ARCH [OUT]
# The sets are built once into SETS from DATA's test split (a later run reuses them); an
# evaluation whose .csv.gz exists is not run again. Environment: DATA (default
# /usr/share/datasets/fashion-mnist), DEVICE (default auto), VIL (default bin/vil), LENGTH_SETS
# (the tool, default build/tools/length_sets), SETS (default OUT/sets), SET_SEED (the sets'
# placements and noise, default 0), LIMIT (test images each evaluation reads, spread over the
# classes, the same images in every set; default 0: all), VARIANTS (the variants evaluated,
# default every one found), ONLY (the sets evaluated by name, e.g. "test canvas112_zero tile4";
# default all), POS (default "interp keep"), SIDES (the upsampled test's multiples of the training
# side, default "2 3 4"), JOBS (evaluations at once, default 1), BATCH (default 500).
set -eu
ARCH=${1:?arch: vil or vim}
OUT=${2:-out/length}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
DEVICE=${DEVICE:-auto}
VIL=${VIL:-bin/vil}
TOOL=${LENGTH_SETS:-build/tools/length_sets}
SETS=${SETS:-$OUT/sets}
LIMIT=${LIMIT:-0}
JOBS=${JOBS:-1}
POS=${POS:-interp keep}
BATCH=${BATCH:-500}
R=$OUT/$ARCH
[ -d "$R" ] || { echo "sets.sh: no results folder $R (dev/length/run.sh base $ARCH $OUT makes one)" >&2; exit 1; }

# the sets, once (sets.json is written last: a folder without it is built again)
if [ ! -f "$SETS/sets.json" ]; then
    "$TOOL" --data "$DATA" --split val --seed "${SET_SEED:-0}" --out "$SETS" > "$OUT/sets_build.log" 2>&1 ||
        { echo "sets.sh: building the sets failed:"; tail -5 "$OUT/sets_build.log"; exit 1; }
fi
S0=$(sed -n 's/.*"item_side": \([0-9]*\).*/\1/p' "$SETS/sets.json")
[ -n "$S0" ] || { echo "sets.sh: $SETS/sets.json names no item_side" >&2; exit 1; }

# the checkpoints: <variant>_s<seed> folders with a last.safetensors, VARIANTS' alone if given
models=""
for d in "$R"/*_s[0-9]*/; do
    n=$(basename "$d")
    [ -f "$d/last.safetensors" ] || continue
    case $n in *[!a-z0-9_]*) continue ;; esac
    if [ -n "${VARIANTS:-}" ]; then
        keep=0
        for v in $VARIANTS; do case $n in "${v}"_s[0-9]*) keep=1 ;; esac; done
        [ $keep = 1 ] || continue
    fi
    models="$models $n"
done
[ -n "$models" ] || { echo "sets.sh: no checkpoints in $R" >&2; exit 1; }

# the conditions, "name side data" a line: the split at the training side and upsampled, then each set
all_conditions() {
    echo "test $S0 $DATA"
    for k in ${SIDES:-2 3 4}; do echo "test $((k * S0)) $DATA"; done
    sed -n 's/.*"name": "\([^"]*\)", "canvas": \([0-9]*\).*/\1 \2/p' "$SETS/sets.json" |
        while read -r name side; do echo "$name $side $SETS/$name"; done
}
conditions() {
    all_conditions | while read -r name side data; do
        if [ -n "${ONLY:-}" ]; then
            case " $ONLY " in *" $name "*) ;; *) continue ;; esac
        fi
        echo "$name $side $data"
    done
}

# eval_one MODEL SIDE POS DATA DIR: one evaluation into DIR/MODEL.csv.gz (left out on failure)
eval_one() {
    f=$5/$1
    "$VIL" eval --model "$R/$1/last.safetensors" --data "$4" --split val --img-size "$2" --pos "$3" --crop-pct 1 \
        --batch "$BATCH" --limit "$LIMIT" --device "$DEVICE" --topk 1 --progress none \
        --predictions-file "$f.tmp.csv" --results-file "$f.json" > "$f.log" 2>&1 &&
        gzip -n -c "$f.tmp.csv" > "$f.tmp.gz" && mv "$f.tmp.gz" "$f.csv.gz" && rm -f "$f.tmp.csv" ||
        { echo "sets.sh: $1 on $4 at $2 px ($3) failed:"; tail -3 "$f.log"; }
}

# every (condition, pos, model) not done yet, JOBS at once; a condition's evaluations cost alike
todo=$(mktemp)
trap 'rm -f "$todo"' EXIT
first_pos=${POS%% *}
conditions | while read -r name side data; do
    for pos in $POS; do
        if [ "$side" = "$S0" ]; then # the trained grid: nothing to move, one evaluation
            [ "$pos" = "$first_pos" ] || continue
            pos=interp
        fi
        for m in $models; do echo "$m $side $pos $data $R/sets/$name.$side/$pos"; done
    done
done > "$todo"
running=0
while read -r m side pos data dir; do
    [ -f "$dir/$m.csv.gz" ] && continue
    mkdir -p "$dir"
    eval_one "$m" "$side" "$pos" "$data" "$dir" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then
        wait
        running=0
    fi
done < "$todo"
wait
total=$(wc -l < "$todo")
failed=0
while read -r m side pos data dir; do [ -f "$dir/$m.csv.gz" ] || failed=$((failed + 1)); done < "$todo"
echo "sets.sh: $ARCH: $((total - failed)) of $total evaluations in $R/sets"
[ "$failed" -eq 0 ] || { echo "sets.sh: $failed evaluations failed (each one's .log beside it)" >&2; exit 1; }
