#!/bin/sh
# sass_profile.sh: per-instruction profile of the scan kernels on the lent GPU machine (after a
# build): the static SASS of cuda/scan.o and Nsight Compute's source page (executed instructions
# and warp-stall samples per SASS instruction) for the kernels matching a regex, as CSV in $OUT,
# from bench_ops at ViL-Tiny's 224 px shapes or, given L B CHUNK, from the scan harness's
# validated calls at that length and batch (CHUNK 0: chosen by shape; --mamba for ViM).
# Analyse here with tools/sass_summary.py.
#   . tools/gpu_env.sh && make -j16 && make dev-cuda && sh dev/cuda/sass_profile.sh 'adjoint|pair' [L B CHUNK [--mamba]]
OUT=${OUT:-out}
mkdir -p "$OUT"
re=${1:-adjoint}
CUDA=${CUDA_HOME:-/usr/local/cuda}
$CUDA/bin/cuobjdump -sass build/cuda/scan.o > "$OUT/scan.sass" 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu $CUDA/bin/ncu 2>/dev/null | head -1)
if [ $# -ge 4 ]; then
    tag=_$2_$3_$4$(echo "$5" | tr -d -)
    set -- build/dev/cuda/scan 2 "$3" 1 --L "$2" --chunk "$4" $5
else
    tag=""
    set -- build/dev/cuda/bench_ops 192 256 1 scan
fi
# each kernel's launches in the first forward and backward (the pair kernel runs in both; chunked,
# once per direction): up to 4 of each are profiled, one CSV section each
for k in $(echo "$re" | tr '|' ' '); do
    $NCU --clock-control none -k "regex:$k" -c 4 --section SourceCounters --section InstructionStats \
        --section WarpStateStats --page source --print-source sass --csv \
        "$@" > "$OUT/src_$k$tag.csv" 2> "$OUT/src_$k$tag.err"
    echo "ncu source $k$tag: rc=$? $(wc -l < "$OUT/src_$k$tag.csv") lines"
done
