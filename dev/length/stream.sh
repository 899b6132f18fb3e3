#!/bin/sh
# dev/length/stream.sh: the stream experiment of issue 49 (README "A stream of images"): the
# causal stream family (configs/stream_fashion.cfg) trained on streams of 8 Fashion-MNIST images
# per recurrence, seed and variant, then read by position in streams of 128 (16x) and 256 (32x);
# dev/length/stream_report.py makes the table with intervals.
#   sh dev/length/stream.sh [OUT]
# Runs: OUT/<variant>_<arch>_s<seed>/ (a run whose pos256.json exists is skipped). Environment:
# DATA (default /usr/share/datasets/fashion-mnist), DEVICE (default auto), VIL (default bin/vil),
# EPOCHS (default 2), EMBED (embed_dim, default 64: the CPU's size; 128 is the config's), SEEDS
# (the zero start's, default "0 1 2 3 4"; empty: none), VARIANTS (after them: tbtt2 = stream_chunk
# 2, noise, fitted, passing; default none), SEEDS2 (the variants', default "0 1 2"), SIGMA (noise's,
# default 0.3), STREAMS128 (evaluation streams of 128, default 1250: 10,000 readouts in positions
# 1-8 and in 121-128), STREAMS256 (default 125), THREADS (OMP_NUM_THREADS, default 2), ARCHS
# (default "vil vim").
set -u
OUT=${1:-out/stream}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
DEVICE=${DEVICE:-auto}
VIL=${VIL:-bin/vil}
E=${EPOCHS:-2}
mkdir -p "$OUT"
export OMP_NUM_THREADS=${THREADS:-2}

# one NAME ARCH SEED [--set ...]: train (unless done) and evaluate at 128 and 256 images
one() {
    n=$1 a=$2 s=$3
    shift 3
    d=$OUT/${n}_${a}_s$s
    [ -f "$d/pos256.json" ] && return 0
    if [ ! -f "$d/last.safetensors" ]; then
        rm -rf "$d"
        "$VIL" train --config configs/stream_fashion.cfg --data "$DATA" --device "$DEVICE" --set arch="$a" \
            --set seed="$s" --set epochs="$E" --set embed_dim="${EMBED:-64}" --set warmup_epochs=0.2 \
            --set eval_every_epochs=0 --set workers=1 --quiet "$@" --out "$d" > "$d.log" 2>&1 ||
            { echo "stream.sh: training $d failed:"; tail -3 "$d.log"; return 1; }
    fi
    for len in 128 256; do # (not k: the variants' keys below are k, and sh's variables are global)
        [ $len = 128 ] && ns=${STREAMS128:-1250} || ns=${STREAMS256:-125}
        "$VIL" eval --model "$d/last.safetensors" --data "$DATA" --device "$DEVICE" --stream-len $len --streams "$ns" \
            --positions-file "$d/pos$len.json" > "$d/eval$len.log" 2>&1 || { echo "stream.sh: eval $len of $d failed"; return 1; }
    done
    echo "$(date +%T) $d: $(grep -h 'in length\|the last 8' "$d/eval128.log" "$d/eval256.log" | sed 's/  loss [0-9.]*//' | tr '\n' ' ')"
}

for s in ${SEEDS-0 1 2 3 4}; do
    for a in ${ARCHS:-vil vim}; do one zero $a $s; done
done
for v in ${VARIANTS:-}; do
    case $v in
    tbtt2) k="--set stream_chunk=2" ;;
    passing) k="--set init_state=passing" ;;
    fitted) k="--set init_state=fitted" ;;
    noise) k="--set init_state=noise --set init_state_sigma=${SIGMA:-0.3}" ;;
    *) echo "stream.sh: unknown variant $v" >&2; exit 2 ;;
    esac
    for s in ${SEEDS2:-0 1 2}; do
        for a in ${ARCHS:-vil vim}; do one "$v" $a $s $k; done
    done
done
