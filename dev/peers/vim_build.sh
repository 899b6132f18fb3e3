#!/bin/sh
# vim_build.sh: the official ViM's CUDA kernels, from a plain copy of github hustvl/Vim in
# .peers/Vim (git-ignored, never committed; on the GPU machine it comes as a carried folder),
# built for sm_90 as the PyTorch extensions its Python code imports: selective_scan_cuda (its
# mamba-1p1p1 fork of mamba_ssm's selective scan) and causal_conv1d_cuda (its causal-conv1d), for
# dev/peers/bench_torch_ops.py (dev/peers/vim_peer.py puts them and the authors' Python packages
# on the path). Built from copies in OUT/src; the authors' sources change only by CUDA 13's cub
# renames (dev/peers/ext_common.sh) and by moving each explicit instantiation into a file of its
# own, so that ninja compiles them side by side: the float and bf16 inputs with float weights
# (what the model runs under bf16 autocast, and the fp32 checks) are built, the fp16, complex and
# low-precision-weight ones become stubs that fail with a message (they would triple the build).
#   sh dev/peers/vim_build.sh [SRC [OUT]]   (default .peers/Vim, /tmp/vim_build)
# The extensions land in OUT/ext/{selective_scan_cuda,causal_conv1d_cuda}.so; the logs in OUT/*.log.
set -u
SRC=${1:-.peers/Vim}
OUT=${2:-${VIM_BUILD:-/tmp/vim_build}}
PEER=vim_build
. "$(dirname "$0")/ext_common.sh"
SCAN_SRC=$SRC/mamba-1p1p1/csrc/selective_scan
CONV_SRC=$SRC/causal-conv1d/csrc
KEEP="float, float|at::BFloat16, float"

[ -f "$SCAN_SRC/selective_scan.cpp" ] && [ -f "$CONV_SRC/causal_conv1d.cpp" ] || fail "no $SCAN_SRC/selective_scan.cpp or
  $CONV_SRC/causal_conv1d.cpp: put a plain copy of github hustvl/Vim there (the fetch tool's mirror:
  git -C MIRROR archive HEAD mamba-1p1p1 causal-conv1d vim | tar -x -C $SRC) and carry .peers"
need_tools
[ -f "$SRC/COMMIT" ] && echo "vim_build: $SRC at $(cat "$SRC/COMMIT")"
rm -rf "$OUT/src" && mkdir -p "$OUT/src/ss" "$OUT/src/cc" "$OUT/ext" || fail "cannot make $OUT/src"
cp "$SCAN_SRC"/*.h "$SCAN_SRC"/*.cuh "$SCAN_SRC"/*.cu "$SCAN_SRC/selective_scan.cpp" "$OUT/src/ss/" || fail "cannot copy $SCAN_SRC"
cp "$CONV_SRC"/*.h "$CONV_SRC"/*.cu "$CONV_SRC/causal_conv1d.cpp" "$OUT/src/cc/" || fail "cannot copy $CONV_SRC"
cub_renames "$OUT"/src/ss/* "$OUT"/src/cc/*
compat_header "$OUT/src/ss"
compat_header "$OUT/src/cc"

ss_srcs="$OUT/src/ss/selective_scan.cpp"
for f in "$OUT"/src/ss/selective_scan_*_*.cu; do
    new=$(split_inst "$f" "$KEEP" "selective_scan_common.h selective_scan.h") || fail "cannot split $f"
    ss_srcs="$ss_srcs $new"
done
cc_srcs="$OUT/src/cc/causal_conv1d.cpp $OUT/src/cc/causal_conv1d_update.cu"
for f in "$OUT/src/cc/causal_conv1d_fwd.cu" "$OUT/src/cc/causal_conv1d_bwd.cu"; do
    new=$(split_inst "$f" "$KEEP" "causal_conv1d.h") || fail "cannot split $f"
    cc_srcs="$cc_srcs $new"
done

# the two extensions side by side, the cores shared between them
t0=$(date +%s)
jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
# shellcheck disable=SC2086
MAX_JOBS=$jobs build_ext selective_scan_cuda "$OUT/ext/ss" "$OUT/src/ss" "$OUT/ss.log" $ss_srcs &
p1=$!
# shellcheck disable=SC2086
MAX_JOBS=$jobs build_ext causal_conv1d_cuda "$OUT/ext/cc" "$OUT/src/cc" "$OUT/cc.log" $cc_srcs &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
[ $r1 -eq 0 ] && [ $r2 -eq 0 ] || fail "the build failed (selective_scan rc=$r1, causal_conv1d rc=$r2; $(( $(date +%s) - t0 )) s)"
cp "$OUT/ext/ss/selective_scan_cuda.so" "$OUT/ext/cc/causal_conv1d_cuda.so" "$OUT/ext/" || fail "cannot gather the extensions"
echo "vim_build: $OUT/ext/selective_scan_cuda.so, causal_conv1d_cuda.so ($(( $(date +%s) - t0 )) s, sm_90)"
