#!/bin/sh
# longhorn_build.sh: the Longhorn authors' scan (github Cranial-XIX/longhorn_cuda, a fork of
# Mamba-1's selective scan; its online_fwd / online_bwd) built as the PyTorch extension
# online_selective_scan_cuda for sm_90, for dev/peers/bench_longhorn.py. The sources are a plain
# copy of that repository in .peers/longhorn_cuda (git-ignored, never committed; on the GPU
# machine it comes as a carried folder), built from a copy in OUT/src. CUDA 13's cub no longer
# has two helpers the kernels call; the copy takes the usual replacements, and nothing else in it
# changes: cub::CTA_SYNC() -> __syncthreads(), cub::LaneId() -> threadIdx.x & 31 (the lane: every
# block of these kernels is one-dimensional). Each input type's forward and backward kernels are
# instantiated in a file of their own (the authors' two .cu files hold three each) so that ninja
# compiles them side by side (MAX_JOBS, default: the CPU count).
#   sh dev/peers/longhorn_build.sh [SRC [OUT]]   (default .peers/longhorn_cuda, /tmp/longhorn_build)
# The extension lands in OUT/ext/online_selective_scan_cuda.so; the log in OUT/build.log.
set -u
SRC=${1:-.peers/longhorn_cuda}
OUT=${2:-${LONGHORN_BUILD:-/tmp/longhorn_build}}
PY=${PYTHON:-python3}
CS=$SRC/csrc/selective_scan
fail() { echo "longhorn_build: $*" >&2; exit 1; }

[ -f "$CS/online_selective_scan.cpp" ] || fail "no $CS/online_selective_scan.cpp: put a plain copy of github
  Cranial-XIX/longhorn_cuda there (the fetch tool's mirror: git -C MIRROR archive HEAD | tar -x -C $SRC)
  and carry .peers to the GPU machine"
command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || fail "nvcc not found (CUDA toolkit)"
"$PY" -c "import torch, torch.utils.cpp_extension" 2> /dev/null || fail "$PY has no torch"
[ -f "$SRC/COMMIT" ] && echo "longhorn_build: $SRC at $(cat "$SRC/COMMIT")"

rm -rf "$OUT/src" && mkdir -p "$OUT/src" "$OUT/ext" || fail "cannot make $OUT/src"
cp "$CS"/*.h "$CS"/*.cuh "$CS/online_selective_scan.cpp" "$OUT/src/" || fail "cannot copy $CS"
sed -i -e 's/cub::CTA_SYNC()/__syncthreads()/g' -e 's/cub::LaneId()/(threadIdx.x \& 31)/g' "$OUT"/src/*
left=$(grep -n "cub::CTA_SYNC\|cub::LaneId" "$OUT"/src/*)
[ -z "$left" ] || fail "the renames left calls behind: $left"
srcs="'$OUT/src/online_selective_scan.cpp'"
for t in BFloat16 Half float; do
    case $t in float) ty=float ;; *) ty=at::$t ;; esac
    printf '#include "selective_scan_online_fwd_kernel.cuh"\ntemplate void selective_scan_online_fwd_cuda<%s>(SSMOnlineParamsBase &params, cudaStream_t stream);\n' \
        "$ty" > "$OUT/src/inst_fwd_$t.cu"
    printf '#include "selective_scan_online_bwd_kernel.cuh"\ntemplate void selective_scan_online_bwd_cuda<%s>(SSMOnlineParamsBwd &params, cudaStream_t stream);\n' \
        "$ty" > "$OUT/src/inst_bwd_$t.cu"
    srcs="$srcs, '$OUT/src/inst_fwd_$t.cu', '$OUT/src/inst_bwd_$t.cu'"
done

# a guard for the binding (online_selective_scan.cpp), included before it: defines AT_ERROR and
# c10::optional only where this torch no longer has them (both were deprecated)
cat > "$OUT/src/compat.h" <<'EOF'
#include <optional>
#include <c10/util/Exception.h>
#ifndef AT_ERROR
#define AT_ERROR(...) TORCH_CHECK(false, __VA_ARGS__)
#endif
#if __has_include(<c10/util/Optional.h>)
#include <c10/util/Optional.h>
#else
namespace c10 { using std::optional; }
#endif
EOF
# the authors' nvcc flags (their setup.py) less its architecture list; torch picks the C++ standard
t0=$(date +%s)
MAX_JOBS=${MAX_JOBS:-$(nproc)} TORCH_CUDA_ARCH_LIST=9.0 "$PY" - > "$OUT/build.log" 2>&1 <<EOF
from torch.utils.cpp_extension import load
load(name="online_selective_scan_cuda", sources=[$srcs], extra_include_paths=["$OUT/src"],
     build_directory="$OUT/ext", verbose=True, extra_cflags=["-O3", "-include", "$OUT/src/compat.h"],
     extra_cuda_cflags=["-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                        "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                        "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
                        "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "-lineinfo"])
EOF
rc=$?
if [ $rc -ne 0 ] || [ ! -f "$OUT/ext/online_selective_scan_cuda.so" ]; then
    echo "longhorn_build: the extension did not build (rc=$rc, $(( $(date +%s) - t0 )) s); the first errors of $OUT/build.log:" >&2
    grep -E "error|Error|undefined" "$OUT/build.log" | head -20 >&2
    echo "... its last lines:" >&2
    tail -8 "$OUT/build.log" >&2
    exit 1
fi
echo "longhorn_build: $OUT/ext/online_selective_scan_cuda.so ($(( $(date +%s) - t0 )) s, sm_90)"
