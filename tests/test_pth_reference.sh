#!/bin/sh
# vil convert against PyTorch itself: each torch.save checkpoint of tests/data/pth (model and
# model_ema) is converted by bin/vil, and tests/reference/check_convert.py reads the original
# with torch.load and the result with safetensors (or a minimal reader where the package is
# missing): the same tensors, names, order and bits. Needs python3 with torch (python3-torch).
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
py=/usr/bin/python3
[ -x "$py" ] && "$py" -c "import torch" 2>/dev/null || py=python3
passed=0
failed=0
for f in tests/data/pth/vim_p4s4.pth tests/data/pth/vim_p4s2.pth tests/data/pth/vil_p4s4.pth; do
    for ema in "" --ema; do
        out="$dir/$(basename "$f" .pth)$ema.safetensors"
        if ! "${VIL_BIN:-bin/vil}" convert "$f" "$out" $ema >/dev/null; then
            echo "FAIL vil convert $f $ema"
            failed=$((failed + 1))
            continue
        fi
        res=$("$py" tests/reference/check_convert.py "$f" "$out" $ema 2>&1)
        printf '%s\n' "$res" | grep -v -E '^(ok |[0-9]+ passed)'
        line=$(printf '%s\n' "$res" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
        if [ -z "$line" ]; then
            echo "FAIL check_convert.py did not run on $f: is python3-torch installed?"
            failed=$((failed + 1))
            continue
        fi
        passed=$((passed + $(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')))
        failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
