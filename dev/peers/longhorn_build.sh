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
PEER=longhorn_build
. "$(dirname "$0")/ext_common.sh"
CS=$SRC/csrc/selective_scan

[ -f "$CS/online_selective_scan.cpp" ] || fail "no $CS/online_selective_scan.cpp: put a plain copy of github
  Cranial-XIX/longhorn_cuda there (the fetch tool's mirror: git -C MIRROR archive HEAD | tar -x -C $SRC)
  and carry .peers to the GPU machine"
need_tools
[ -f "$SRC/COMMIT" ] && echo "longhorn_build: $SRC at $(cat "$SRC/COMMIT")"

rm -rf "$OUT/src" && mkdir -p "$OUT/src" "$OUT/ext" || fail "cannot make $OUT/src"
cp "$CS"/*.h "$CS"/*.cuh "$CS/online_selective_scan.cpp" "$OUT/src/" || fail "cannot copy $CS"
cub_renames "$OUT"/src/*
set -- "$OUT/src/online_selective_scan.cpp"
for t in BFloat16 Half float; do
    case $t in float) ty=float ;; *) ty=at::$t ;; esac
    printf '#include "selective_scan_online_fwd_kernel.cuh"\ntemplate void selective_scan_online_fwd_cuda<%s>(SSMOnlineParamsBase &params, cudaStream_t stream);\n' \
        "$ty" > "$OUT/src/inst_fwd_$t.cu"
    printf '#include "selective_scan_online_bwd_kernel.cuh"\ntemplate void selective_scan_online_bwd_cuda<%s>(SSMOnlineParamsBwd &params, cudaStream_t stream);\n' \
        "$ty" > "$OUT/src/inst_bwd_$t.cu"
    set -- "$@" "$OUT/src/inst_fwd_$t.cu" "$OUT/src/inst_bwd_$t.cu"
done
compat_header "$OUT/src"
t0=$(date +%s)
build_ext online_selective_scan_cuda "$OUT/ext" "$OUT/src" "$OUT/build.log" "$@" || exit 1
echo "longhorn_build: $OUT/ext/online_selective_scan_cuda.so ($(( $(date +%s) - t0 )) s, sm_90)"
