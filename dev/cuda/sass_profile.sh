#!/bin/sh
# sass_profile.sh: per-instruction profile of the scan kernels on the lent GPU machine (after a
# build): the static SASS of cuda/scan.o and Nsight Compute's source page (executed instructions
# and warp-stall samples per SASS instruction) for the kernels matching a regex, as CSV in $OUT.
# Analyse here with tools/sass_summary.py.
#   . tools/gpu_env.sh && make -j16 && make dev-cuda && sh dev/cuda/sass_profile.sh 'adjoint|pair'
OUT=${OUT:-out}
mkdir -p "$OUT"
re=${1:-adjoint}
CUDA=${CUDA_HOME:-/usr/local/cuda}
$CUDA/bin/cuobjdump -sass build/cuda/scan.o > "$OUT/scan.sass" 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu $CUDA/bin/ncu 2>/dev/null | head -1)
# the pair kernel runs twice in bench_ops (forward, then the backward prep): both are profiled
for k in $(echo "$re" | tr '|' ' '); do
    $NCU --clock-control none -k "regex:$k" -c 2 --section SourceCounters --section InstructionStats \
        --section WarpStateStats --page source --print-source sass --csv \
        build/dev/cuda/bench_ops 192 256 1 scan > "$OUT/src_$k.csv" 2> "$OUT/src_$k.err"
    echo "ncu source $k: rc=$? $(wc -l < "$OUT/src_$k.csv") lines"
done
