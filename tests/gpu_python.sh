#!/bin/sh
# The vil package on a GPU (make test-gpu): python/tests/gpu_*.py with a torch that sees CUDA:
# vil.ops on vil's CUDA kernels against the float64 reference (bf16, float32 and the other dtypes),
# streams, devices, CUDA graph capture, and a bf16-autocast training step of the module. The
# python: $PYTHON, else the first of python3, /usr/bin/python3 whose torch sees a GPU. Closes with
# "N passed, N failed"; a machine where no torch sees a GPU prints why and passes nothing.
set -u
build=${VIL_BUILD:-build}
VIL_LIB=$(cd "$build/lib" 2>/dev/null && pwd)/libvil.so
export VIL_LIB
py=${PYTHON:-}
if [ -z "$py" ]; then
    for cand in python3 /usr/bin/python3; do
        if "$cand" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
            py=$cand
            break
        fi
    done
fi
if [ -z "$py" ]; then
    echo "skip tests/gpu_python.sh: no python3 whose torch sees a CUDA GPU (PYTHON= names one)"
    echo "0 passed, 0 failed"
    exit 0
fi
. tests/tally.sh
for t in python/tests/gpu_*.py; do
    out=$("$py" "$t" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v -E '^(ok  |[0-9]+ passed)'
    tally "$t" "$out" $rc
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
