#!/bin/sh
# demo.sh: what `make demo` runs after the build: a short CPU training run of configs/vil_fashion.cfg
# on Fashion-MNIST (Debian's dataset-fashion-mnist), `vil eval` on the 10,000 test images, and
# `vil classify` of a few test images exported as PNG. About 3-4 minutes on 2 cores.
# Knobs (environment): DATA, OUT, STEPS (training steps), BATCH, DEVICE.
set -eu

DATA=${DATA:-/usr/share/datasets/fashion-mnist}
OUT=${OUT:-out/fashion_demo}
STEPS=${STEPS:-600}
BATCH=${BATCH:-64}
DEVICE=${DEVICE:-cpu}

if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
    echo "demo: no Fashion-MNIST in $DATA: run 'make deps' (package dataset-fashion-mnist) or set DATA" >&2
    exit 1
fi

# a new run each time: `vil train` refuses to start over a folder that holds a run
rm -f "$OUT"/last.safetensors "$OUT"/last.state.safetensors "$OUT"/best.safetensors \
    "$OUT"/ema.safetensors "$OUT"/eval.txt
start=$(date +%s)
echo "== training configs/vil_fashion.cfg for $STEPS steps of $BATCH images (a short run: the full"
echo "   recipe is 'vil train --config configs/vil_fashion.cfg --data $DATA')"
# Part of one epoch with the schedule compressed into it: a tenth of an epoch of warmup, cosine
# to the end at STEPS, a smaller batch for more updates at twice the recipe's lr (2e-3), an EMA
# horizon of 100 steps, and no random erasing (it pays off over epochs, not in minutes).
bin/vil train --config configs/vil_fashion.cfg --data "$DATA" --device "$DEVICE" --out "$OUT" \
    --set epochs=1 --set max_steps="$STEPS" --set batch="$BATCH" --set base_lr=0.016 \
    --set warmup_epochs=0.1 --set ema_decay=0.99 --set reprob=0 --set log_every=50
trained=$(date +%s)

echo
echo "== vil eval on the Fashion-MNIST test set"
bin/vil eval --model "$OUT/best.safetensors" --data "$DATA" --split test \
    --device "$DEVICE" | tee "$OUT/eval.txt"
result=$(tail -n 1 "$OUT/eval.txt")

echo
echo "== vil classify on 6 test images exported as PNG (file, true label, class)"
mkdir -p "$OUT/png"
build/tools/export_png "$DATA" test 6 "$OUT/png" | tee "$OUT/png/labels.tsv"
bin/vil classify --model "$OUT/best.safetensors" --topk 2 --device "$DEVICE" \
    "$OUT"/png/test_*.png

end=$(date +%s)
echo
echo "demo: Fashion-MNIST test accuracy after $STEPS steps: $result"
echo "demo: $((end - start)) s in all ($((trained - start)) s training); checkpoints in $OUT/"
