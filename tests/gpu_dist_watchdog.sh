#!/bin/sh
# gpu_dist_watchdog.sh: on a machine with 2 GPUs, a rank that dies or hangs ends a 2-process
# NCCL run (mpirun -np 2 --bind-to none, NCCL_NVLS_ENABLE=0) within a bounded time, in training
# and in the validation pass; the CPU twin is tests/test_dist_watchdog.c. The last rank kills
# (SIGKILL) or stops (SIGSTOP) itself through the test hook VIL_TEST_FAULT (train/train.c):
# train: as step N begins (the survivor waits in a host collective), grad: after step N's first
# decision of all ranks (the survivor's host waits on the GPU, where NCCL's all-reduce spins:
# the watchdog's NCCL view must see it), val: as the validation pass begins. One case stops a
# rank from outside at a random moment. Each run must end within dist_timeout x 1.25 + TEARDOWN
# seconds of the fault, with the watchdog's message (or, for a killed rank, mpirun's own
# teardown), leaving no process. After `make` (bin/vil with CUDA and NCCL):
#   sh tests/gpu_dist_watchdog.sh [OUT]    (logs in OUT, default /tmp/vil_watchdog_logs)
# Ends with "N passed, N failed"; exits 1 when a check failed. DEVICE=cpu runs the same cases
# on the CPU (MPI instead of NCCL: a check of this script on a machine without GPUs).
OUT=${1:-/tmp/vil_watchdog_logs}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
VIL=${VIL:-bin/vil}
TIMEOUT=8     # dist_timeout, seconds
TEARDOWN=20   # MPI_Abort, mpirun's SIGTERM then SIGKILL, a GPU process's exit
pass=0
fail=0
check() { # check COND-STATUS "what"
    if [ "$1" -eq 0 ]; then pass=$((pass + 1)); echo "ok   $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi
}
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$DEVICE" = cpu ] || [ "$ngpu" -ge 2 ] || { check 1 "2 GPUs needed, $ngpu found"; finish; }
[ -x "$VIL" ] || { check 1 "$VIL not built (make)"; finish; }
command -v mpirun > /dev/null || { check 1 "mpirun not found (apt-get install openmpi-bin)"; finish; }
[ "$DEVICE" = cpu ] || "$VIL" help 2>&1 | grep -q "NCCL yes" || echo "note: '$VIL help' does not say 'NCCL yes': $("$VIL" help 2>&1 | grep -i nccl)"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
# the watchdog's limit before vil train applies dist_timeout: NCCL's join
export VIL_DIST_TIMEOUT=60
R=/tmp/vil_watchdog; rm -rf $R; mkdir -p $R/data
# 2,048 + 512 random 28 x 28 gray images of 10 classes (IDX): 16 steps an epoch at 64 x 2
python3 - $R/data <<'EOF'
import os, random, struct, sys
d = sys.argv[1]
random.seed(0)
for pre, n in (("train", 2048), ("t10k", 512)):
    with open(f"{d}/{pre}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + os.urandom(n * 784))
    with open(f"{d}/{pre}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(random.randrange(10) for _ in range(n)))
EOF
ARGS="--config configs/vil_fashion.cfg --device $DEVICE --set epochs=40 --set batch=64 --set workers=2 \
--set log_every=1 --set eval_every_epochs=1 --set eval_batch=128 --set dist_timeout=$TIMEOUT"

now() { date +%s.%N; }
secs() { echo "$1 $2" | awk '{printf "%.2f", $2 - $1}'; }

# run NAME FAULT MPIFLAGS [FLAGS...]: the run in the background, its log polled; sets rc,
# t_fault (empty: the hook's line never came) and t_end (seconds since the start)
run() {
    name=$1; fault=$2; mflags=$3; shift 3
    log=$OUT/watchdog_$name.log
    t0=$(now)
    VIL_TEST_FAULT=$fault timeout 300 mpirun -np 2 --bind-to none $mflags "$VIL" train --data $R/data \
        --out $R/$name $ARGS "$@" > "$log" 2>&1 &
    pid=$!
    t_fault=""
    while kill -0 $pid 2> /dev/null; do
        [ -z "$t_fault" ] && grep -q "VIL_TEST_FAULT: rank 1 sends" "$log" && t_fault=$(secs $t0 $(now))
        sleep 0.1
    done
    wait $pid
    rc=$?
    t_end=$(secs $t0 $(now))
    [ -z "$t_fault" ] && grep -q "VIL_TEST_FAULT: rank 1 sends" "$log" && t_fault=$t_end
}

# no process of run NAME left; any found is killed
none_left() {
    left=$(pgrep -f -- "[-]-out $R/$1 " | tr '\n' ' ')
    check $([ -z "$left" ] && echo 0 || echo 1) "$1: no process left ${left:+(killed: $left)}"
    [ -n "$left" ] && kill -9 $left 2> /dev/null
}

# the time from the fault to the end within BOUND seconds
within() { # within NAME AFTER BOUND
    check $(awk -v a="$2" -v b="$3" 'BEGIN { print (a != "" && a >= 0 && a <= b) ? 0 : 1 }') \
        "$1: ended ${2:-?} s after the fault (bound $3 s)"
}

wd_bound=$(awk -v t=$TIMEOUT -v d=$TEARDOWN 'BEGIN { print 1.25 * t + d }')
msg="no progress from the other ranks for $TIMEOUT s in "

# undisturbed, with the short timeout and saves every 10 steps: no false alarm
run calm "" "" --set max_steps=40 --set save_every_steps=10
check $([ $rc -eq 0 ] && grep -q "done:" "$OUT/watchdog_calm.log" && ! grep -q "no progress" "$OUT/watchdog_calm.log" && echo 0 || echo 1) \
    "calm: an undisturbed run with dist_timeout=$TIMEOUT ends normally (rc $rc, $t_end s)"
none_left calm

# case NAME FAULT MPIFLAGS PATTERN: the survivor's watchdog reports the fault (grep -E PATTERN)
case_wd() {
    run $1 $2 "$3"
    after=$([ -n "$t_fault" ] && secs $t_fault $t_end)
    echo "$1 ($2 $3): rc $rc, ended ${after:-?} s after the fault, $t_end s in all"
    grep -E "no progress|failed|fatal|exited on signal|VIL_TEST_FAULT" "$OUT/watchdog_$1.log" | head -4 | sed 's/^/  | /'
    check $(grep -qE "$4" "$OUT/watchdog_$1.log" && echo 0 || echo 1) "$1: the message matches '$4'"
    within $1 "$after" $wd_bound
    # --enable-recovery: mpirun's status does not carry the abort's
    case "$3" in *recovery*) ;; *) check $([ $rc -ne 0 ] && [ $rc -ne 124 ] && echo 0 || echo 1) "$1: mpirun exits non-zero, not by timeout(1) (rc $rc)" ;; esac
    none_left $1
}

case_wd stop_train stop:train:10 "" "rank 0: ${msg}a decision of all ranks during training \(step 10\); exiting"
grad="the gradient all-reduce on the GPU \(NCCL\)"
[ "$DEVICE" = cpu ] && grad="the gradient all-reduce"
case_wd stop_grad stop:grad:10 "" "rank 0: ${msg}$grad during training \(step 10\); exiting"
case_wd stop_val stop:val:1 "" "rank 0: ${msg}.* during validation \(step 16\); exiting"
# a crash where the launcher lets the others run on (as srun without --kill-on-bad-exit): the
# watchdog's timeout, NCCL's own error, or a CUDA call failing on the dead peer's memory
case_wd kill_grad_rec kill:grad:10 --enable-recovery "rank 0: (${msg}|the gradient all-reduce failed: NCCL)|vil: fatal: .*(cuda|nccl)"

# a crash under mpirun's own error handling: it ends the job itself (or the watchdog first)
run kill_train kill:train:10 ""
after=$([ -n "$t_fault" ] && secs $t_fault $t_end)
echo "kill_train: rc $rc, ended ${after:-?} s after the fault, $t_end s in all"
check $(grep -qE "exited on signal 9|$msg" "$OUT/watchdog_kill_train.log" && [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo 0 || echo 1) \
    "kill_train: mpirun names the killed rank (or the watchdog reports it), rc $rc"
within kill_train "$after" $wd_bound
none_left kill_train

# a rank stopped from outside at a random moment of training: either survivor's message
name=stop_ext
log=$OUT/watchdog_$name.log
timeout 300 mpirun -np 2 --bind-to none "$VIL" train --data $R/data --out $R/$name $ARGS > "$log" 2>&1 &
pid=$!
i=0
while ! grep -q "step 25/" "$log" 2> /dev/null && kill -0 $pid 2> /dev/null && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
# $pid is timeout(1); its child mpirun starts the ranks: the newer of the two stops
mp=$(pgrep -P $pid | head -1)
victim=$([ -n "$mp" ] && pgrep -P $mp | sort -n | tail -1)
t_fault=$(now)
[ -n "$victim" ] && kill -STOP $victim
wait $pid
rc=$?
after=$(secs $t_fault $(now))
echo "$name: SIGSTOP to pid ${victim:-none}: rc $rc, ended $after s after the signal"
grep -E "no progress|failed" "$log" | head -2 | sed 's/^/  | /'
check $([ -n "$victim" ] && grep -qE "rank [01]: ${msg}" "$log" && [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo 0 || echo 1) \
    "$name: the other rank's watchdog reports it (rc $rc)"
within $name "$after" $wd_bound
none_left $name
finish
