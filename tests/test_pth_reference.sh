#!/bin/sh
# vil convert against PyTorch itself: each torch.save checkpoint of tests/data/pth (model and
# model_ema) is converted by bin/vil, and tests/reference/check_convert.py reads the original
# with torch.load and the result with safetensors (or a minimal reader where the package is
# missing): the same tensors, names, order and bits. Then the .pth vil writes: the original
# converted to OUT.pth, and the safetensors result converted on to a second .pth, each checked
# by tests/reference/check_pth_write.py (torch.load(..., weights_only=True), the official keys
# and order, the tensors and metadata of the safetensors file, torch's archive layout).
# Needs python3 with torch (python3-torch).
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
py=/usr/bin/python3
[ -x "$py" ] && "$py" -c "import torch" 2>/dev/null || py=python3
passed=0
failed=0
# the closing "N passed, N failed" line of a check's output $2 added to the totals; $1 names it
count() {
    printf '%s\n' "$2" | grep -v -E '^(ok |[0-9]+ passed)'
    line=$(printf '%s\n' "$2" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $1 did not run: is python3-torch installed?"
        failed=$((failed + 1))
        return
    fi
    passed=$((passed + $(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')))
    failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
}
for f in tests/data/pth/vim_p4s4.pth tests/data/pth/vim_p4s2.pth tests/data/pth/vil_p4s4.pth; do
    for ema in "" --ema; do
        out="$dir/$(basename "$f" .pth)$ema.safetensors"
        if ! "${VIL_BIN:-bin/vil}" convert "$f" "$out" $ema >/dev/null; then
            echo "FAIL vil convert $f $ema"
            failed=$((failed + 1))
            continue
        fi
        count "check_convert.py on $f $ema" "$("$py" tests/reference/check_convert.py "$f" "$out" $ema 2>&1)"
        pth="$dir/$(basename "$f" .pth)$ema.vil.pth"
        again="$dir/$(basename "$f" .pth)$ema.again.pth"
        if ! "${VIL_BIN:-bin/vil}" convert "$f" "$pth" $ema >/dev/null ||
            ! "${VIL_BIN:-bin/vil}" convert "$out" "$again" >/dev/null; then
            echo "FAIL vil convert $f $ema to .pth"
            failed=$((failed + 1))
            continue
        fi
        count "check_pth_write.py on $pth" "$("$py" tests/reference/check_pth_write.py "$f" "$pth" "$out" $ema 2>&1)"
        count "check_pth_write.py on $again" "$("$py" tests/reference/check_pth_write.py "$f" "$again" "$out" $ema 2>&1)"
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
