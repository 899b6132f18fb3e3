#!/bin/sh
# The vil package (python/vil: vil from PyTorch through libvil's C API) with Debian's torch:
# python/tests/test_*.py (the ops against their PyTorch reference, the module against `vil
# classify` and `vil eval`, the fine-tuning round trip, the ctypes binding), each closing with
# "N passed, N failed"; then the package installed with pip into a virtual environment that sees
# the system's torch (offline, no build isolation) and used from outside the checkout.
# Needs python3 with torch (python3-torch), libvil.so ($VIL_BUILD/lib) and bin/vil.
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
py=${PYTHON:-/usr/bin/python3}
if ! "$py" -c "import torch" 2>/dev/null; then
    for cand in /usr/bin/python3 python3; do
        if "$cand" -c "import torch" 2>/dev/null; then py=$cand; break; fi
    done
fi
build=${VIL_BUILD:-build}
VIL_LIB=$(cd "$build/lib" 2>/dev/null && pwd)/libvil.so
VIL_BIN=${VIL_BIN:-bin/vil}
export VIL_LIB VIL_BIN
tally_hint="is python3-torch installed, and $VIL_LIB built?"
. tests/tally.sh
check() { # check NAME COMMAND...: one ok / FAIL line
    if "$@" > "$dir/check.log" 2>&1; then
        echo "ok   $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name:"
        tail -n 15 "$dir/check.log"
        failed=$((failed + 1))
    fi
}
for t in python/tests/test_*.py; do
    out=$("$py" "$t" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v -E '^(ok  |[0-9]+ passed)'
    tally "$t" "$out" $rc
done

# pip install --no-build-isolation into a venv that sees the system's torch, offline; from a copy,
# so that the build leaves nothing in the checkout
if ! "$py" -m venv --system-site-packages "$dir/venv" > "$dir/venv.log" 2>&1; then
    echo "skip pip install into a virtual environment: $py -m venv failed ($(tail -n 1 "$dir/venv.log"); Debian: apt-get install python3-venv)"
else
    cp -r python "$dir/src"
    name="pip install --no-build-isolation ./python into a venv (offline)"
    check "$dir/venv/bin/python" -m pip install --no-build-isolation --no-index -q "$dir/src"
    cd "$dir"
    name="the installed package, outside the checkout: load, forward, save through \$VIL_LIB"
    check "$dir/venv/bin/python" -c "
import os, sys, torch, vil
assert vil.__file__.startswith('$dir/venv/'), vil.__file__
m = vil.Classifier(arch='vim', img_size=16, patch_size=4, stride=4, embed_dim=16, depth=1, d_state=4, num_classes=3)
vil.save(m, 'm.safetensors')
back = vil.load('m.safetensors')
x = torch.randn(2, 3, 16, 16)
assert torch.allclose(back(x), m(x), rtol=1e-5, atol=1e-6)
print(vil.library_path(), vil.library_version())
"
    name="the installed package without \$VIL_LIB says where it looked"
    check env -u VIL_LIB "$dir/venv/bin/python" -c "
import vil
try:
    p = vil.library_path()
    print('found an installed libvil:', p)   # a machine with \`make install\` done: that one is fine
except vil.LibraryNotFound as e:
    assert 'VIL_LIB' in str(e) and 'Looked at' in str(e), e
    print(e)
"
    cd - > /dev/null
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
