#!/usr/bin/env python3
"""ptxas_report.py: without a GPU (and without cuobjdump or nvdisasm, which a machine with only
nvcc lacks), per kernel of one .cu file compiled for one architecture: ptxas's registers and
spill bytes, and the kernel's static SASS size in instructions (its .text section / 16 bytes on
sm_70 and later), read from the cubin's ELF section table. For a kernel change before a GPU call:
registers and spills set the occupancy, and a fully unrolled step loop's static size is close to
its executed instructions per iteration (Nsight Compute gives those on the GPU machine:
sass_profile.sh).
  python3 dev/cuda/ptxas_report.py cuda/scan_bwd.cu 'adjoint_kernel.*Li16' [--arch 90] [-- -DADJ_WARPS_LH=12]
Run from the repository root (the .cu files include "cuda/..."). Exit 1 when nvcc fails."""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile


def text_sizes(cubin):
    """{kernel mangled name: static instructions} from the ELF64 section table"""
    d = open(cubin, "rb").read()
    if d[:4] != b"\x7fELF" or d[4] != 2:
        raise SystemExit(f"{cubin}: not an ELF64 file")
    shoff = struct.unpack_from("<Q", d, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", d, shoff + i * shentsize) for i in range(shnum)]
    stroff = secs[shstrndx][4]

    def name(off):
        end = d.index(b"\0", stroff + off)
        return d[stroff + off:end].decode()

    out = {}
    for s in secs:
        n = name(s[0])
        if n.startswith(".text."):
            out[n[len(".text."):]] = s[5] // 16
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cu")
    ap.add_argument("regex", nargs="?", default=".", help="kernels whose mangled name matches (default: all)")
    ap.add_argument("--arch", default="90", help="compute capability digits (default 90)")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC") or "/usr/local/cuda/bin/nvcc")
    ap.add_argument("extra", nargs="*", help="after --: more nvcc arguments (-D knobs)")
    a = ap.parse_args()
    rx = re.compile(a.regex)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        cmd = [a.nvcc, "-O3", "-std=c++17", f"-gencode=arch=compute_{a.arch},code=sm_{a.arch}", "-I.",
               "--expt-relaxed-constexpr", "-Xptxas", "-v", "-cubin", "-o", cubin, a.cu] + a.extra
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-4000:])
            return 1
        info, fn = {}, None
        for line in r.stderr.splitlines():
            m = re.search(r"Compiling entry function '(\S+)'", line)
            if m:
                fn = m.group(1)
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m and fn:
                info.setdefault(fn, {})["spill"] = f"{m.group(1)}/{m.group(2)}"
            m = re.search(r"Used (\d+) registers", line)
            if m and fn:
                info.setdefault(fn, {})["regs"] = int(m.group(1))
        sizes = text_sizes(cubin)
    rows = [k for k in sorted(info) if rx.search(k)]
    print(f"{'kernel (mangled)':72s} {'regs':>4s} {'spill st/ld':>11s} {'SASS':>6s}")
    for k in rows:
        print(f"{k[:72]:72s} {info[k].get('regs', 0):4d} {info[k].get('spill', '0/0'):>11s} {sizes.get(k, 0):6d}")
    if not rows:
        print(f"no kernel matches {a.regex!r} ({len(info)} compiled)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
