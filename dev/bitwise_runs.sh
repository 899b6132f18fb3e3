#!/bin/bash
# bitwise_runs.sh BASE_VIL NEW_VIL [single] [resume] [mpi]: for a change that must change no
# number (a refactoring: issue 46's rule), the same short CPU trainings on two builds of vil, and
# their checkpoints and training states compared byte for byte (cmp). single: 12 steps of ViL,
# ViM, each initial-state intervention, SGD, Lamb and recompute 1; resume: stopped at step 6 and
# resumed (the restore path); mpi: two ranks with passing states (the per-rank state gathered).
# Run from the repository root; DATA (Fashion-MNIST's IDX folder, dataset-fashion-mnist; any IDX
# folder of 28x28 images will do), OUT (the runs' folder) and DEVICE (cpu, the default, or cuda:
# the CUDA backend's sums are in a fixed order, so its runs repeat bit for bit too) may be set. Prints a line per run: identical or DIFFERENT; exit 1 on any
# difference.
#   git worktree add /tmp/base HEAD~3 && make -C /tmp/base CUDA=0 bin/vil
#   sh dev/bitwise_runs.sh /tmp/base/bin/vil bin/vil
set -u
B=$1 N=$2
shift 2
WHICH="${*:-single resume mpi}"
D=${DATA:-/usr/share/datasets/fashion-mnist}
O=${OUT:-/tmp/vil-bitwise}
rm -rf "$O" && mkdir -p "$O"
DEV=${DEVICE:-cpu}
A="--config configs/vil_fashion.cfg --data $D --device $DEV --progress none --set max_steps=12 --set log_every=4 --set eval_every_epochs=0 --set workers=1 --threads 2"
bad=0

same() { # name file...: compare the two runs' files
    local name=$1 ok=1
    shift
    for f in "$@"; do
        if [ -f "$O/base_$name/$f" ] || [ -f "$O/new_$name/$f" ]; then
            cmp -s "$O/base_$name/$f" "$O/new_$name/$f" || { ok=0; echo "  $name: $f differs"; }
        fi
    done
    [ $ok = 1 ] || bad=1
    echo "$name: $([ $ok = 1 ] && echo identical || echo DIFFERENT) ($(tail -1 "$O/base_$name.log"), $(tail -1 "$O/new_$name.log"))"
}

run() { # name extra...: 12 steps from scratch
    local name=$1
    shift
    for t in base new; do
        V=$B; [ $t = new ] && V=$N
        $V train $A --set batch=64 --out "$O/${t}_$name" "$@" > "$O/${t}_$name.log" 2>&1
        echo "$t rc=$?" >> "$O/${t}_$name.log"
    done
    same "$name" last.safetensors last.state.safetensors ema.safetensors
}

resume_run() { # name extra...: stopped at step 6, then resumed to 12
    local name=$1
    shift
    for t in base new; do
        V=$B; [ $t = new ] && V=$N
        { $V train $A --set batch=64 --out "$O/${t}_$name" "$@" --stop-after 6 &&
          $V train --resume "$O/${t}_$name" --data "$D" --device $DEV --progress none --threads 2; } > "$O/${t}_$name.log" 2>&1
        echo "$t rc=$?" >> "$O/${t}_$name.log"
    done
    same "$name" last.safetensors last.state.safetensors
}

case " $WHICH " in *" single "*)
    run vil
    run vim --set arch=vim
    run fitted --set init_state=fitted
    run passing --set init_state=passing
    run noise --set init_state=noise --set init_state_sigma=0.5
    run sgd --set optimizer=sgd --set momentum=0.9
    run lamb --set optimizer=lamb
    run recompute --set recompute=1 ;;
esac
case " $WHICH " in *" resume "*)
    resume_run resumed_fitted --set init_state=fitted
    resume_run resumed_passing --set init_state=passing
    resume_run resumed_vim --set arch=vim ;;
esac
case " $WHICH " in *" mpi "*)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
    for t in base new; do
        V=$B; [ $t = new ] && V=$N
        mpirun -np 2 --oversubscribe --bind-to none $V train $A --set batch=32 --out "$O/${t}_mpi_passing" \
            --set init_state=passing > "$O/${t}_mpi_passing.log" 2>&1
        echo "$t rc=$?" >> "$O/${t}_mpi_passing.log"
    done
    same mpi_passing last.safetensors last.state.safetensors ;;
esac
exit $bad
