#!/bin/sh
# Runs each test binary given on the command line, adds up the "N passed, N failed" lines they
# print, and closes with the total. Exits non-zero when any test failed or any binary crashed
# or printed no summary.
passed=0
failed=0
broken=""
for t in "$@"; do
    echo "== $t"
    out=$("$t" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        broken="$broken $t(rc=$rc,no-summary)"
        failed=$((failed + 1))
        continue
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        broken="$broken $t(rc=$rc)"
        failed=$((failed + 1))
    fi
done
[ -n "$broken" ] && echo "broken test binaries:$broken"
echo "total: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
