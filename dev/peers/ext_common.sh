# ext_common.sh: what the peers' build scripts (longhorn_build.sh, vim_build.sh) share, sourced by
# them: the compatibility header for today's torch, CUDA 13's cub renames, the split of a .cu
# file's explicit instantiations into files of their own (built side by side, or stubbed), and the
# build of a torch extension with the authors' nvcc flags for sm_90.
PY=${PYTHON:-python3}
fail() { echo "$PEER: $*" >&2; exit 1; }

need_tools() {
    command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || fail "nvcc not found (CUDA toolkit)"
    "$PY" -c "import torch, torch.utils.cpp_extension" 2> /dev/null || fail "$PY has no torch"
}

# compat.h in $1: AT_ERROR and c10::optional, only where this torch no longer has them (both were
# deprecated), included before the authors' bindings
compat_header() {
    cat > "$1/compat.h" <<'H'
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
H
}

# CUDA 13's cub no longer has two helpers the Mamba-1 family of kernels calls; the usual
# replacements (every block of these kernels is one-dimensional), checked to leave none behind
cub_renames() {
    sed -i -e 's/cub::CTA_SYNC()/__syncthreads()/g' -e 's/cub::LaneId()/(threadIdx.x \& 31)/g' "$@"
    left=$(grep -n "cub::CTA_SYNC\|cub::LaneId" "$@")
    [ -z "$left" ] || fail "the renames left calls behind: $left"
}

# split_inst FILE.cu KEEP HEADERS: FILE.cu's explicit instantiations ("template void F<T...>(P
# &params, cudaStream_t stream);") move out of it: each one whose template arguments are in KEEP
# (a |-separated list such as "float, float|at::BFloat16, float") gets a file of its own that
# includes the rest, and the others become one stub file of explicit specialisations that fail
# with a message (their kernels are never compiled: the peers are timed in bf16 and checked in
# fp32). HEADERS: the includes that declare P for the stubs. Prints the new sources' paths.
split_inst() {
    "$PY" - "$@" <<'PYEOF'
import os, re, sys
path, keep, headers = sys.argv[1], set(sys.argv[2].split("|")), sys.argv[3].split()
d, base = os.path.split(path)
stem = base[:-3]
text = open(path).read()
pat = re.compile(r"^template void (\w+)<(.+?)>\((\w+) &params, cudaStream_t stream\);\s*$", re.M)
insts = pat.findall(text)
if not insts:
    sys.exit(f"split_inst: no explicit instantiations in {path}")
open(os.path.join(d, stem + "_body.cuh"), "w").write(pat.sub("", text))
os.remove(path)
stubs = ["#include <ATen/ATen.h>", "#include <c10/util/complex.h>"] + [f'#include "{h}"' for h in headers]
declared = set()
out = []
for i, (fn, targs, param) in enumerate(insts):
    if targs in keep:
        p = os.path.join(d, f"{stem}_inst{i}.cu")
        open(p, "w").write(f'#include "{stem}_body.cuh"\ntemplate void {fn}<{targs}>({param} &params, cudaStream_t stream);\n')
        out.append(p)
    else:
        if fn not in declared:
            declared.add(fn)
            stubs.append(f"template <typename input_t, typename weight_t> void {fn}({param} &params, cudaStream_t stream);")
        stubs.append(f"template <> void {fn}<{targs}>({param} &, cudaStream_t) {{\n"
                     f'    TORCH_CHECK(false, "{fn}<{targs}> was not built (dev/peers/vim_build.sh builds float and bf16 inputs with float weights)");\n}}')
if len(stubs) > 2 + len(headers):
    p = os.path.join(d, f"{stem}_stubs.cu")
    open(p, "w").write("\n".join(stubs) + "\n")
    out.append(p)
print("\n".join(out))
PYEOF
}

# build_ext NAME EXT_DIR INCLUDE_DIR LOG SOURCES...: torch.utils.cpp_extension.load with the
# authors' nvcc flags (their setup.py) less their architecture list (TORCH_CUDA_ARCH_LIST=9.0);
# torch picks the C++ standard. The extension lands in EXT_DIR/NAME.so.
build_ext() {
    name=$1 ext=$2 inc=$3 log=$4
    shift 4
    srcs=""
    for s in "$@"; do srcs="$srcs'$s', "; done
    mkdir -p "$ext"
    MAX_JOBS=${MAX_JOBS:-$(nproc)} TORCH_CUDA_ARCH_LIST=9.0 "$PY" - > "$log" 2>&1 <<PYEOF
from torch.utils.cpp_extension import load
load(name="$name", sources=[$srcs], extra_include_paths=["$inc"], build_directory="$ext", verbose=True,
     extra_cflags=["-O3", "-include", "$inc/compat.h"],
     extra_cuda_cflags=["-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                        "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                        "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
                        "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "-lineinfo"])
PYEOF
    rc=$?
    if [ $rc -ne 0 ] || [ ! -f "$ext/$name.so" ]; then
        echo "$PEER: $name did not build (rc=$rc); the first errors of $log:" >&2
        grep -E "error|Error|undefined" "$log" | head -20 >&2
        echo "... its last lines:" >&2
        tail -8 "$log" >&2
        return 1
    fi
}
