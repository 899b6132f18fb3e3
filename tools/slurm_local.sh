#!/bin/sh
# slurm_local.sh: a one-node Slurm cluster on this machine (make test-slurm; trying an sbatch
# script before a real cluster). munged on a private key and socket, slurmctld and slurmd on a
# slurm.conf of this host's CPUs; the config, state, spool, logs and pid files in one folder.
#   tools/slurm_local.sh start|stop|status
#   then: export SLURM_CONF=<folder>/slurm.conf (start prints it); sinfo, sbatch, srun
# Folder: $VIL_SLURM_DIR (default build/slurm of this checkout). Ports: $VIL_SLURM_PORT
# (slurmctld, default 6817) and the next one (slurmd). Needs root (slurmd starts each job as its
# user) and Debian's slurm-wlm and munge (tools/deps.sh slurm). Touches nothing in /etc or /run.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${VIL_SLURM_DIR:-$ROOT/build/slurm}
PORT=${VIL_SLURM_PORT:-6817}
WAIT=${VIL_SLURM_WAIT:-60} # seconds for the node to come up, and for jobs and daemons to end
DAEMONS="slurmd slurmctld munged"

die() {
    echo "slurm_local: $*" >&2
    exit 1
}

# the pid of a daemon started here, when it is alive and is that daemon (not a reused pid)
alive() {
    [ -f "$DIR/$1.pid" ] || return 1
    p=$(cat "$DIR/$1.pid" 2>/dev/null)
    case "$p" in '' | *[!0-9]*) return 1 ;; esac
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$1" ] || return 1
    echo "$p"
}

tails() {
    for f in munged slurmctld slurmd; do
        [ -s "$DIR/$f.log" ] || continue
        echo "---- $DIR/$f.log (last lines)" >&2
        tail -n 15 "$DIR/$f.log" >&2
    done
}

# a folder's absolute path
abs() {
    mkdir -p "$1" && (cd "$1" && pwd)
}

# srun's MPI plugin: PMIx when Slurm has the plugin and Open MPI (if it is the MPI here) was
# built against PMIx, as Debian's are; else PMI-2 (MPICH); else none (mpirun inside the job)
mpi_default() {
    plugins=$(ls /usr/lib/*/slurm-wlm /usr/lib/slurm /usr/lib64/slurm 2>/dev/null)
    if echo "$plugins" | grep -qx 'mpi_pmix.so' &&
        { ! command -v ompi_info >/dev/null 2>&1 || ompi_info --parsable 2>/dev/null | grep -q '^mca:pmix:ext'; }; then
        echo pmix
    elif echo "$plugins" | grep -qx 'mpi_pmi2.so'; then
        echo pmi2
    else
        echo none
    fi
}

write_conf() {
    # slurmd -C: "NodeName=HOST CPUs=.. Boards=.. SocketsPerBoard=.. CoresPerSocket=.. ThreadsPerCore=.. RealMemory=.."
    node=$(slurmd -C 2>/dev/null | head -n 1)
    case "$node" in NodeName=*) ;; *) die "slurmd -C printed no node line: '$node'" ;; esac
    name=$(echo "$node" | sed 's/^NodeName=\([^ ]*\).*/\1/')
    cat > "$DIR/slurm.conf.tmp" <<EOF
# written by tools/slurm_local.sh: a one-node cluster on this host, everything under $DIR
ClusterName=vil-local
SlurmctldHost=$name(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
# no cgroups in a container: processes are tracked through /proc, tasks are not bound
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=$(mpi_default)
ReturnToService=2
MailProg=/bin/true
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=local Nodes=$name Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$DIR/slurm.conf.tmp" "$DIR/slurm.conf"
}

node_state() {
    SLURM_CONF="$DIR/slurm.conf" sinfo -h -o %t 2>/dev/null | head -n 1
}

status() {
    n=0
    for d in munged slurmctld slurmd; do
        if p=$(alive "$d"); then
            echo "$d: running (pid $p)"
            n=$((n + 1))
        else
            echo "$d: not running"
        fi
    done
    if [ $n -gt 0 ] && alive slurmctld >/dev/null; then
        echo "node: $(node_state)   (SLURM_CONF=$DIR/slurm.conf)"
    fi
    [ $n -eq 3 ]
}

start() {
    [ "$(id -u)" = 0 ] || die "needs root: slurmd starts each job as its user"
    for c in munged slurmctld slurmd sinfo sbatch srun; do
        command -v $c >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v $c >/dev/null 2>&1 ||
            die "$c not found: run   tools/deps.sh slurm   (Debian's slurm-wlm and munge)"
    done
    PATH=$PATH:/usr/sbin:/sbin
    DIR=$(abs "$DIR") || die "cannot create $DIR"
    if status >/dev/null; then
        echo "slurm_local: already running (node $(node_state)); export SLURM_CONF=$DIR/slurm.conf"
        return 0
    fi
    for d in $DAEMONS; do
        alive "$d" >/dev/null && die "$d from an earlier start still runs: tools/slurm_local.sh stop first"
        rm -f "$DIR/$d.pid"
    done
    # munged refuses a socket folder that not everyone may search
    chmod 755 "$DIR" && mkdir -p "$DIR/state" "$DIR/spool" || die "cannot prepare $DIR"
    if [ ! -s "$DIR/munge.key" ]; then
        (umask 077 && head -c 1024 /dev/urandom > "$DIR/munge.key") || die "cannot write $DIR/munge.key"
    fi
    for f in munged slurmctld slurmd; do : > "$DIR/$f.log"; done
    munged --key-file="$DIR/munge.key" --socket="$DIR/munge.socket" --pid-file="$DIR/munged.pid" \
        --log-file="$DIR/munged.log" --seed-file="$DIR/munged.seed" || { tails; die "munged did not start"; }
    write_conf
    # -c: a fresh controller, no jobs from an earlier start
    if ! slurmctld -c -f "$DIR/slurm.conf" || ! slurmd -f "$DIR/slurm.conf"; then
        tails
        stop >/dev/null
        die "slurmctld or slurmd did not start (is port $PORT or $((PORT + 1)) taken? VIL_SLURM_PORT picks others)"
    fi
    i=0
    while [ "$(node_state)" != idle ]; do
        i=$((i + 1))
        gone=""
        [ $i -le 4 ] || for d in $DAEMONS; do alive "$d" >/dev/null || gone="$gone $d"; done
        if [ -n "$gone" ] || [ $i -gt $((WAIT * 2)) ]; then
            if [ -n "$gone" ]; then
                echo "slurm_local: exited:$gone (is port $PORT or $((PORT + 1)) taken? VIL_SLURM_PORT picks others)" >&2
            else
                echo "slurm_local: the node is '$(node_state)', not idle, after ${WAIT} s" >&2
            fi
            tails
            stop >/dev/null
            exit 1
        fi
        sleep 0.5
    done
    echo "slurm_local: up: $(sed -n 's/^NodeName=\([^ ]*\) CPUs=\([0-9]*\).*/node \1, \2 CPUs/p' "$DIR/slurm.conf"), MPI $(sed -n 's/^MpiDefault=//p' "$DIR/slurm.conf")"
    echo "export SLURM_CONF=$DIR/slurm.conf"
}

# the job steps still running here: slurmstepd keeps a socket in the spool folder for each
steps_left() {
    ls "$DIR/spool" 2>/dev/null | grep -c '_[0-9]*\.[0-9a-z]*$'
}

stop() {
    DIR=$(cd "$DIR" 2>/dev/null && pwd) || { echo "slurm_local: not running (no $DIR)"; return 0; }
    PATH=$PATH:/usr/sbin:/sbin
    if alive slurmctld >/dev/null && alive munged >/dev/null; then
        # the jobs first, while slurmd can still end their steps
        SLURM_CONF="$DIR/slurm.conf" squeue -h -o %A 2>/dev/null | xargs -r env SLURM_CONF="$DIR/slurm.conf" scancel
        i=0
        while [ "$(steps_left)" -gt 0 ] && [ $i -lt $((WAIT * 2)) ]; do
            sleep 0.5
            i=$((i + 1))
        done
    fi
    left="" stopped="not running"
    for d in $DAEMONS; do
        p=$(alive "$d") || continue
        stopped=stopped
        kill -TERM "$p"
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt $((WAIT * 2)) ]; do
            sleep 0.5
            i=$((i + 1))
        done
        if kill -0 "$p" 2>/dev/null; then
            kill -KILL "$p"
            sleep 0.5
        fi
        kill -0 "$p" 2>/dev/null && left="$left $d($p)"
        rm -f "$DIR/$d.pid"
    done
    [ -z "$left" ] || die "still running after SIGKILL:$left"
    n=$(steps_left)
    [ "$n" -eq 0 ] || die "$n job step(s) still hold sockets in $DIR/spool"
    echo "slurm_local: $stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: tools/slurm_local.sh start|stop|status" >&2; exit 2 ;;
esac
