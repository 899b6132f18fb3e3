#!/bin/sh
# gpu_check.sh: one call on the lent GPU machine: build, `make test-gpu`, compute-sanitizer
# memcheck on both GPU tests, then `vil bench` for the configs given (default: ViL-Tiny).
# Full logs go to $OUT (or ./out); the summary printed last fits the reply's tail.
#   . tools/gpu_env.sh && sh dev/cuda/gpu_check.sh [tests] [sanitize] [bench:CFG:BATCH ...]
OUT=${OUT:-out}
mkdir -p "$OUT"
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
t0=$(date +%s)
make -j16 > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
[ $# -eq 0 ] && set -- tests sanitize bench:configs/vil_tiny.cfg:256
for step in "$@"; do
    case "$step" in
    tests)
        make test-gpu > "$OUT/test_gpu.log" 2>&1
        echo "make test-gpu: rc=$?"
        grep -E "^FAIL|broken|^total" "$OUT/test_gpu.log" | head -40
        ;;
    sanitize)
        for t in "gpu_ops quick" gpu_model; do
            name=$(echo "$t" | cut -d' ' -f1)
            $SAN --tool memcheck --leak-check no --error-exitcode 3 build/tests/$t > "$OUT/san_$name.log" 2>&1
            echo "memcheck $t: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/san_$name.log" | tail -1) $(grep -E '^[0-9]+ passed' "$OUT/san_$name.log" | tail -1)"
        done
        ;;
    ops:*)
        # per-op timing of one block at the model's shapes: ops:D:B
        make dev-cuda >> "$OUT/build.log" 2>&1
        D=$(echo "$step" | cut -d: -f2); bs=$(echo "$step" | cut -d: -f3)
        build/dev/cuda/bench_ops "$D" "$bs" 20 > "$OUT/ops_$D.log" 2>&1
        echo "bench_ops D=$D B=$bs: rc=$?"; cat "$OUT/ops_$D.log"
        ;;
    ncu:*)
        # Nsight Compute on the kernels matching a regex, in bench_ops (one launch each)
        make dev-cuda >> "$OUT/build.log" 2>&1
        re=$(echo "$step" | cut -d: -f2); cnt=$(echo "$step" | cut -d: -f3); filt=$(echo "$step" | cut -d: -f4)
        NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
        $NCU --clock-control none -k "regex:$re" -c "${cnt:-4}" --section SpeedOfLight \
            --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats \
            build/dev/cuda/bench_ops 192 256 1 "$filt" > "$OUT/ncu_$cnt.log" 2>&1
        echo "ncu: rc=$?"
        grep -iE "void |Duration|Executed Ipc A|Executed Instructions   |Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issued Warp Per|No Eligible|Warp Cycles Per Issued|stall|Eligible Warps" "$OUT/ncu_$cnt.log" | cut -c1-200 | head -90
        ;;
    bench:*)
        cfg=$(echo "$step" | cut -d: -f2); bs=$(echo "$step" | cut -d: -f3)
        log="$OUT/bench_$(basename "$cfg" .cfg)_$bs.log"
        bin/vil bench --device cuda --model "$cfg" --batch "$bs" > "$log" 2>&1
        echo "bench $cfg batch $bs: rc=$?"
        cat "$log"
        ;;
    esac
done
