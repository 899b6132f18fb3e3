# tally.sh: sourced by the test scripts that run other test programs (tests/test_python.sh,
# tests/gpu_python.sh): passed and failed, and tally WHAT OUT RC, which adds the "N passed, N
# failed" line of the output OUT of WHAT to them. No such line (WHAT did not run), or RC != 0
# with none failed, counts as one failure with a line saying so; $tally_hint ends the first.
passed=0
failed=0
tally() {
    line=$(printf '%s\n' "$2" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $1 did not run (rc=$3)${tally_hint:+: $tally_hint}"
        failed=$((failed + 1))
        return
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $1 exited $3"
        failed=$((failed + 1))
    fi
}
