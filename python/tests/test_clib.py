"""test_clib.py: the package's binding to libvil: every ctypes struct laid out as a C compiler
lays out include/vil.h's (offsets and sizes, from a program compiled here), every function the
package declares exported by the library, and the library's discovery: $VIL_LIB, the checkout's
build folders, a clear error that lists where it looked, a library of another version refused
(a stub compiled here), and `import vil` without any library (the reference needs none).
Run: /usr/bin/python3 python/tests/test_clib.py"""
import os
import re
import shutil
import subprocess
import sys
import textwrap

from common import REPO, TMP, run_tests, vil

_clib = vil._clib


def cc():
    for c in (os.environ.get("CC"), "cc", "gcc"):
        if c and shutil.which(c):
            return c
    return None


def test_struct_layouts(T):
    c = cc()
    if not c:
        T.skip("struct layouts", "no C compiler (cc, gcc, $CC) to lay out include/vil.h")
        return
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "vil.h"', "int main(void) {"]
    for sname, S in _clib.STRUCTS.items():
        lines.append(f'    printf("{sname} sizeof %zu\\n", sizeof({sname}));')
        for f, _ in S._fields_:
            lines.append(f'    printf("{sname} {f} %zu\\n", offsetof({sname}, {f}));')
    lines += ["    return 0;", "}"]
    src, exe = os.path.join(TMP, "layout.c"), os.path.join(TMP, "layout")
    open(src, "w").write("\n".join(lines) + "\n")
    p = subprocess.run([c, "-I", os.path.join(REPO, "include"), src, "-o", exe], capture_output=True, text=True)
    if not T.ok("the layout program compiles (every field name exists in vil.h)", p.returncode == 0, p.stderr[-500:]):
        return
    want = {}
    for line in subprocess.run([exe], capture_output=True, text=True, check=True).stdout.splitlines():
        s, f, n = line.split()
        want[(s, f)] = int(n)
    for sname, S in _clib.STRUCTS.items():
        T.equal(f"{sname} size", __import__("ctypes").sizeof(S), want[(sname, "sizeof")])
        bad = [f for f, _ in S._fields_ if getattr(S, f).offset != want[(sname, f)]]
        T.ok(f"{sname} offsets ({len(S._fields_)} fields)", not bad, f"differ: {bad}" if bad else "")


def test_exports(T):
    lib = _clib.lib()
    T.ok("every declared function is exported", all(hasattr(lib, n) for n in _clib._SIGS))
    T.ok("the library's version is the package's", _clib.EXPECT_MIN <= lib.vil_version_number() < _clib.EXPECT_BELOW,
         vil.library_version())
    header = open(os.path.join(REPO, "include", "vil.h")).read()
    missing = [n for n in _clib._SIGS if not re.search(rf"\b{n}\(", header)]
    T.ok("every declared function is in include/vil.h", not missing, f"not there: {missing}" if missing else "")


def run_py(code, **env):
    e = dict(os.environ)
    e.pop("VIL_LIB", None)
    e.update(env)
    e["PYTHONPATH"] = os.path.join(REPO, "python")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e)


def test_discovery(T):
    p = run_py("import vil; print(vil.library_path())")
    found = p.stdout.strip()
    builds = [os.path.join(REPO, b, "lib", "libvil.so") for b in ("build", os.path.join("build", "cpu"))]
    T.ok("without VIL_LIB: the checkout's build", p.returncode == 0 and found in builds, found or p.stderr[-300:])
    missing = os.path.join(TMP, "no", "libvil.so")
    p = run_py("""
        import vil, torch
        x = [torch.zeros(1, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(7)]
        out = vil.ops.scan_bidir_reference(x[0:2], x[2:4], x[4:6], x[6], [torch.ones(3)] * 2,
                                           recurrence="longhorn", dt_ld=0, N=1)
        print("reference ok", out.shape)
        try:
            vil.library_path()
        except vil.LibraryNotFound as e:
            print(e)
        """, VIL_LIB=missing)
    T.ok("import vil and the reference need no library", "reference ok" in p.stdout, p.stderr[-300:])
    T.ok("a VIL_LIB that is not there: the error names it", "$VIL_LIB" in p.stdout and missing in p.stdout,
         p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-300:])
    libm = __import__("ctypes.util").util.find_library("m")
    p = run_py("""
        import vil
        try:
            vil.load("x.safetensors")
        except vil.LibraryNotFound as e:
            print("refused:", e)
        """, VIL_LIB=libm or "libm.so.6")
    T.ok("a library that is not libvil is refused", "refused:" in p.stdout and "vil_version_number" in p.stdout,
         p.stdout.strip()[-200:] or p.stderr[-300:])
    c = cc()
    if not c:
        T.skip("another version", "no C compiler for the stub library")
        return
    # a stub exporting the API's names, of version 1.1.0
    src, so = os.path.join(TMP, "stub.c"), os.path.join(TMP, "libvil_stub.so")
    body = [f"int {n}(void) {{ return 0; }}" for n in _clib._SIGS if n not in ("vil_version_number", "vil_version_text")]
    body += ["int vil_version_number(void) { return 10100; }",
             'const char *vil_version_text(void) { return "vil 1.1.0 (a stub)"; }']
    open(src, "w").write("\n".join(body) + "\n")
    r = subprocess.run([c, "-shared", "-fPIC", src, "-o", so], capture_output=True, text=True)
    if not T.ok("the stub compiles", r.returncode == 0, r.stderr[-300:]):
        return
    p = run_py("""
        import vil
        try:
            vil.library_path()
        except vil.LibraryNotFound as e:
            print("refused:", e)
        """, VIL_LIB=so)
    T.ok("a libvil of another version is refused, saying both", "refused:" in p.stdout and "1.1.0" in p.stdout
         and "0.9.x" in p.stdout, p.stdout.strip()[-300:] or p.stderr[-300:])


def test_errors_are_vils(T):
    lib = _clib.lib()
    h = __import__("ctypes").c_void_p()
    rc = lib.vil_ctx_new(b"tpu", 0, 0, __import__("ctypes").byref(h))
    T.equal("vil_ctx_new('tpu') is VIL_ERR_ARG", rc, _clib.VIL_ERR_ARG)
    T.raises("check() raises VilError with vil's message", vil.VilError, lambda: _clib.check(rc, "vil_ctx_new"), "tpu")


if __name__ == "__main__":
    sys.exit(run_tests(globals(), sys.argv[1:]))
