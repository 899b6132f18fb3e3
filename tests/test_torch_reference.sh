#!/bin/sh
# The whole network against an independent PyTorch implementation (tools/torch_reference.py,
# float64 autograd, written the way the official ViM code computes): logits, loss, the input
# gradient and every parameter gradient of small ViL and ViM models, from vil's CPU path
# (build/tools/ref_dump); every recurrence's bidirectional scan alone and its causal one
# (direction 0), forward and gradients (build/tools/scan_dump [--causal] --rec ID against
# torch_reference.py --scan); and the optimizers' steps (tests/test_optim --dump against
# tools/optim_reference.py: torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD, timm's Lamb).
# Needs python3 with torch (Debian: python3-torch).
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
py=${PYTHON:-python3}
if ! "$py" -c "import torch" 2>/dev/null; then
    for cand in /usr/bin/python3 python3; do
        if "$cand" -c "import torch" 2>/dev/null; then py=$cand; break; fi
    done
fi
passed=0
failed=0
# tally WHAT OUT RC: adds the "N passed, N failed" line of a reference script's output OUT
tally() {
    line=$(printf '%s\n' "$2" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $1 did not run (rc=$3): is python3-torch installed?"
        failed=$((failed + 1))
        return
    fi
    passed=$((passed + $(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')))
    failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
}
for arch in vil vim; do
    mkdir -p "$dir/$arch"
    if ! "${VIL_BUILD:-build}"/tools/ref_dump "$dir/$arch" "$arch"; then
        echo "FAIL ref_dump $arch"
        failed=$((failed + 1))
        continue
    fi
    out=$("$py" tools/torch_reference.py "$dir/$arch" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v '^ok  '
    tally "torch reference for $arch" "$out" $rc
done
# every recurrence of vil/rec/list.h: vil's CPU scan against its float64 reference (doc/scans.md),
# 70 channels: a partial channel block of the CPU scan (64)
dump=${VIL_BUILD:-build}/tools/scan_dump
recs=$("$dump" --list) || { echo "FAIL scan_dump --list"; failed=$((failed + 1)); recs=; }
[ -n "$recs" ] || { echo "FAIL scan_dump --list names no recurrence ($dump)"; failed=$((failed + 1)); }
for rec in $recs; do
    for op in "" --causal; do # the bidirectional op, and the causal one (direction 0 alone)
        f="$dir/scan$op-$rec.safetensors"
        if ! "$dump" $op --rec "$rec" "$f" 2 60 70 16; then
            echo "FAIL scan_dump $op --rec $rec"
            failed=$((failed + 1))
            continue
        fi
        out=$("$py" tools/torch_reference.py --scan "$f" 2>&1)
        rc=$?
        printf '%s\n' "$out" | grep -v '^ok  '
        tally "the $rec scan$op reference" "$out" $rc
    done
done
# the optimizers (AdamW, Adam, SGD, Lamb) against torch.optim and timm's Lamb step
mkdir -p "$dir/optim"
if ! "${VIL_BUILD:-build}"/tests/test_optim --dump "$dir/optim" >/dev/null; then
    echo "FAIL test_optim --dump"
    failed=$((failed + 1))
else
    out=$("$py" tools/optim_reference.py "$dir/optim" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v '^[0-9]* passed'
    tally "optimizer reference" "$out" $rc
fi
# the bidirectional Longhorn scan (vil/scan.c) against a float64 torch autograd reference of
# doc/scans.md, and the mapping to the Longhorn authors' kernel conventions (dev/peers/)
out=$("$py" dev/peers/bench_longhorn.py --dry-run --scan-dump "${VIL_BUILD:-build}"/tools/scan_dump 2>&1)
rc=$?
printf '%s\n' "$out" | grep -E '^FAIL'
tally "the Longhorn scan reference" "$out" $rc
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
