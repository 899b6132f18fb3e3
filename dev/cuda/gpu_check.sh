#!/bin/sh
# gpu_check.sh: one call on the lent GPU machine: build, `make test-gpu`, compute-sanitizer
# memcheck on both GPU tests, then `vil bench` for the configs given (default: ViL-Tiny).
# Full logs go to $OUT (or ./out); the summary printed last fits the reply's tail.
#   . tools/gpu_env.sh && sh dev/cuda/gpu_check.sh [tests] [sanitize] [bench:CFG:BATCH ...] [dev] [e2e] [data] [pth]
#                                                  [peer:TIMM_MODEL:BATCH[:compile]] [mpi:CFG:BATCH[:NP]] [tfevents]
#                                                  [res:CFG:SIZES:BATCHES[:TIMM_MODEL]] [scan:L:B:CHUNKS[:mamba[:SPLITS]]]
#                                                  [scanprof:L:B:CHUNK[:mamba[:SPLIT]]] [scanncu:L:B:CHUNK:REGEX[:mamba]]
#                                                  [scaling:CFG:BATCH:NPS[:STEPS:GLOBAL]] [peer_longhorn]
# dev builds the kernel sandbox (make dev-cuda) and runs every harness with every version at its
# defaults, a line each (validation OK/FAIL and us per call); dev/cuda/README.md.
# e2e and data need the corpus (carry `corpus`, made by `/usr/bin/python3 tools/make_corpus.py corpus`):
# e2e trains ViL-Tiny on it on the GPU, evaluates, and classifies with --device cuda and cpu;
# data runs bench-data with 1 and 16 threads.
OUT=${OUT:-out}
mkdir -p "$OUT"
SAN=/usr/local/cuda/bin/compute-sanitizer
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1) # scanprof, scanncu, ncu
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
t0=$(date +%s)
make -j16 $GPU_CHECK_TARGETS > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
[ $# -eq 0 ] && set -- tests sanitize bench:configs/vil_tiny.cfg:256
# 40 copies of the corpus's training images (16,200 files): an epoch of the size ImageNet's steady
# state sees, for the data and train steps
big_corpus() {
    BIG=/tmp/vil_big
    [ -d $BIG/train ] && return
    for d in corpus/train/*/; do c=$(basename $d); mkdir -p $BIG/train/$c
        for k in $(seq 1 40); do for f in $d*; do cp "$f" "$BIG/train/$c/${k}_$(basename $f)"; done; done; done
}
# the fields of a scan or scanprof step, NAME:L:B:CHUNKS[:mamba[:SPLITS]]
scan_fields() {
    L=$(echo "$1" | cut -d: -f2); bs=$(echo "$1" | cut -d: -f3); cks=$(echo "$1" | cut -d: -f4)
    mb=$(echo "$1" | cut -s -d: -f5); sps=$(echo "$1" | cut -s -d: -f6)
}
for step in "$@"; do
    case "$step" in
    tests)
        make test-gpu > "$OUT/test_gpu.log" 2>&1
        echo "make test-gpu: rc=$?"
        grep -E "^FAIL|broken|^total" "$OUT/test_gpu.log" | head -40
        ;;
    sanitize)
        for t in "gpu_ops quick" gpu_model; do
            name=$(echo "$t" | cut -d' ' -f1)
            $SAN --tool memcheck --leak-check no --error-exitcode 3 build/tests/$t > "$OUT/san_$name.log" 2>&1
            echo "memcheck $t: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/san_$name.log" | tail -1) $(grep -E '^[0-9]+ passed' "$OUT/san_$name.log" | tail -1)"
        done
        ;;
    dev)
        # every harness of dev/cuda with each of its versions (1, 2, ... until one is refused as
        # not there), scan also with --mamba; the logs in $OUT/dev_*.log
        make dev-cuda >> "$OUT/build.log" 2>&1 || { echo "make dev-cuda failed"; tail -20 "$OUT/build.log"; continue; }
        for src in dev/cuda/*.cu; do
            hn=$(basename "$src" .cu); extra=""
            [ "$hn" = scan ] && extra=--mamba
            for flag in "" $extra; do
                for v in 1 2 3 4 5 6 7 8 9; do
                    log="$OUT/dev_${hn}_v$v${flag:+_$(echo "$flag" | tr -d -)}.log"
                    build/dev/cuda/$hn $v $flag > "$log" 2>&1
                    rc=$?
                    [ $rc -eq 2 ] && [ $v -gt 1 ] && { rm -f "$log"; break; }
                    echo "$hn $v${flag:+ $flag}: rc=$rc $(grep '^summary' "$log" || tail -1 "$log")"
                done
            done
        done
        ;;
    ops:*)
        # per-op timing of one block at the model's shapes: ops:D:B
        make dev-cuda >> "$OUT/build.log" 2>&1
        D=$(echo "$step" | cut -d: -f2); bs=$(echo "$step" | cut -d: -f3)
        build/dev/cuda/bench_ops "$D" "$bs" 20 > "$OUT/ops_$D.log" 2>&1
        echo "bench_ops D=$D B=$bs: rc=$?"; cat "$OUT/ops_$D.log"
        ;;
    scan:*)
        # the scan harness at one length and batch over chunk sizes: scan:L:B:CHUNKS[:mamba[:SPLITS]]
        # (CHUNKS comma-separated; 0 chosen by shape, -1 the sequential kernels; SPLITS the
        # forward's threads per channel, comma-separated: 0 chosen by shape, 1, 4)
        make dev-cuda >> "$OUT/build.log" 2>&1
        scan_fields "$step"
        for sp in $(echo "${sps:-0}" | tr ',' ' '); do
            for c in $(echo "$cks" | tr ',' ' '); do
                build/dev/cuda/scan 2 "$bs" 10 --L "$L" --chunk "$c" --split "$sp" ${mb:+--mamba} >> "$OUT/scan_sweep.log" 2>&1
                echo "scan L=$L B=$bs chunk $c split $sp${mb:+ mamba}: rc=$? $(tail -1 "$OUT/scan_sweep.log" | sed 's/.*validation/validation/')"
            done
        done
        ;;
    scanprof:*)
        # each kernel's time in the scan harness's first forward and backward (the validated
        # calls), by Nsight Compute (kernels serialized): scanprof:L:B:CHUNK[:mamba[:SPLIT]]
        make dev-cuda >> "$OUT/build.log" 2>&1
        scan_fields "$step"; c=$cks; sp=$sps
        log="$OUT/scanprof_${L}_${bs}_${c}${mb:+_m}${sp:+_s$sp}.log"
        $NCU --clock-control none --metrics gpu__time_duration.sum -k "regex:scan_|colsum" -c 24 \
            build/dev/cuda/scan 2 "$bs" 1 --L "$L" --chunk "$c" --split "${sp:-0}" ${mb:+--mamba} > "$log" 2>&1
        echo "scanprof L=$L B=$bs chunk $c${mb:+ mamba}${sp:+ split $sp}: rc=$?"
        awk '/^  [a-z_]+.*\(/ {k=$0; sub(/^ +/, "", k); sub(/\(ScanArgs.*|\(float.*|\(const.*/, "", k); gsub(/ /, "", k); g=$0; sub(/.*\) \(/, "(", g); sub(/, Context.*/, "", g)} /gpu__time_duration.sum/ {printf "  %-40s %-28s %10s %s\n", k, g, $NF, $(NF-1)}' "$log"
        ;;
    scanncu:*)
        # Nsight Compute's issue-stall reasons, pipe use and instruction mix of the scan kernels
        # matching REGEX in the harness's validated calls: scanncu:L:B:CHUNK:REGEX[:mamba]
        make dev-cuda >> "$OUT/build.log" 2>&1
        L=$(echo "$step" | cut -d: -f2); bs=$(echo "$step" | cut -d: -f3); c=$(echo "$step" | cut -d: -f4)
        re=$(echo "$step" | cut -d: -f5); mb=$(echo "$step" | cut -s -d: -f6)
        log="$OUT/scanncu_${L}_${bs}_${c}_$(echo "$re" | tr -c 'a-z0-9\n' '_')${mb:+_m}.log"
        $NCU --clock-control none -k "regex:$re" -c 8 --section SpeedOfLight --section Occupancy \
            --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats \
            --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum,smsp__cycles_active.avg" \
            build/dev/cuda/scan 2 "$bs" 1 --L "$L" --chunk "$c" ${mb:+--mamba} > "$log" 2>&1
        echo "scanncu L=$L B=$bs chunk $c $re${mb:+ mamba}: rc=$?"
        grep -E "void |Duration|Executed Ipc A|Issue Slots Busy|Registers Per|Achieved Occupancy|Eligible Warps|Warp Cycles Per Issued|Pipe|stalled_[a-z_]+_per_issue_active.ratio +[a-z]* +[0-9.]*[1-9]|wavefronts_mem_shared|smsp__inst_executed.sum|cycles_active" "$log" \
            | awk '!/stalled/ || $NF+0 >= 0.05' | cut -c1-160 | head -120
        ;;
    ncu:*)
        # Nsight Compute on the kernels matching a regex, in bench_ops (one launch each)
        make dev-cuda >> "$OUT/build.log" 2>&1
        re=$(echo "$step" | cut -d: -f2); cnt=$(echo "$step" | cut -d: -f3); filt=$(echo "$step" | cut -d: -f4)
        $NCU --clock-control none -k "regex:$re" -c "${cnt:-4}" --section SpeedOfLight \
            --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats \
            build/dev/cuda/bench_ops 192 256 1 "$filt" > "$OUT/ncu_$cnt.log" 2>&1
        echo "ncu: rc=$?"
        grep -iE "void |Duration|Executed Ipc A|Executed Instructions   |Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issued Warp Per|No Eligible|Warp Cycles Per Issued|stall|Eligible Warps" "$OUT/ncu_$cnt.log" | cut -c1-200 | head -90
        ;;
    pth)
        # .pth files: convert against torch.load + safetensors.torch.load_file, the test files as
        # this torch writes them (test_pth, gpu_pth), then vil compare of random-weight stand-ins
        # of the four published sizes on a made-up 1000-class folder (2 random PNGs per class:
        # speed and memory only, the accuracy means nothing)
        sh tests/test_pth_reference.sh > "$OUT/pth_ref.log" 2>&1; echo "convert vs torch: $(tail -1 "$OUT/pth_ref.log")"
        P=/tmp/vil_pth; rm -rf $P; python3 tests/reference/make_vim_pth.py $P > /dev/null
        rm -rf /tmp/pth_keep; cp -r tests/data/pth /tmp/pth_keep
        cp $P/* tests/data/pth/ && echo "torch $(python3 -c 'import torch; print(torch.__version__)') files:" \
            "test_pth $(build/tests/test_pth 2>/dev/null | tail -1), gpu_pth $(build/tests/gpu_pth | tail -1)"
        cp /tmp/pth_keep/* tests/data/pth/
        for a in "vil_t 16 vil tiny" "vim_t 16 vim tiny" "vil_s 16 vil small" "vim_s 16 vim small" "vim_t8 8 vim tiny"; do
            set -- $a; python3 tests/reference/make_vim_pth.py --full $P/$1.pth $2 $3 $4 > /dev/null; done
        python3 -c "
import os, numpy as np
from PIL import Image
r = np.random.RandomState(0)
for c in range(1000):
    d = '$P/in1k/val/n%08d' % c
    os.makedirs(d, exist_ok=True)
    for i in range(2):
        Image.fromarray(r.randint(0, 256, (80, 80, 3), dtype=np.uint8)).save('%s/%d.png' % (d, i))"
        bin/vil compare --models $P/vil_t.pth $P/vim_t.pth $P/vil_s.pth $P/vim_s.pth --ema --data $P/in1k \
            --img-size 224,384,512 --batch 128 --device cuda --out "$OUT/cmp" | grep -v "images  top-1"
        bin/vil compare --models $P/vim_t8.pth --data $P/in1k --batch 128 --device cuda --out /tmp/c8 | tail -3
        # a batch that cannot fit says so before it allocates
        bin/vil bench --device cuda --model configs/vil_tiny.cfg --set img_size=1024 --batch 512 2>&1 | tail -1
        ;;
    e2e)
        R=/tmp/vil_e2e; rm -rf $R
        bin/vil train --config configs/vil_tiny.cfg --data corpus --device cuda --out $R \
            --set num_classes=10 --set epochs=2 --set warmup_epochs=0 --set batch=64 --set workers=12 --set log_every=5 \
            > "$OUT/e2e_train.log" 2>&1
        echo "train on cuda: rc=$?"; tail -4 "$OUT/e2e_train.log"
        bin/vil eval --device cuda --model $R/last.safetensors --data corpus > "$OUT/e2e_eval.log" 2>&1
        echo "eval on cuda: rc=$?"; tail -3 "$OUT/e2e_eval.log"
        bin/vil info --device cuda --model $R/last.safetensors > "$OUT/e2e_info.log" 2>&1
        echo "info on cuda: rc=$?"; head -4 "$OUT/e2e_info.log"
        img=$(ls corpus/val/*/* | head -3)
        for dev in cuda cpu; do
            bin/vil classify --device $dev --model $R/last.safetensors --topk 3 $img > "$OUT/e2e_classify_$dev.log" 2>&1
            echo "classify on $dev: rc=$?"; cat "$OUT/e2e_classify_$dev.log"
        done
        ;;
    data)
        # the corpus's 405 files make a 256-sample epoch (DeiT's rule), and the loader drains at
        # every epoch boundary: the 16-thread runs use 40 copies of it (an epoch of 16,128
        # samples, the steady state ImageNet would see)
        big_corpus
        # exact / fast decode, each with and without the shared decode of repeated augmentation's copies
        for mode in exact exact:--no-share-decode fast fast:--no-share-decode; do
            dec=${mode%%:*}; flag=$(echo "$mode" | cut -s -d: -f2); tag=$dec${flag:+_noshare}
            bin/vil bench-data --data $BIG --threads 1 --batches 40 --decode $dec $flag > "$OUT/data_${tag}_1.log" 2>&1
            echo "bench-data $tag threads 1: rc=$? $(grep -E 'images/s:|decodes:' "$OUT/data_${tag}_1.log" | cut -c1-40 | tr '\n' ' ')"
            bin/vil bench-data --data $BIG --threads 16 --batch 128 --batches 300 --decode $dec $flag > "$OUT/data_${tag}_16.log" 2>&1
            echo "bench-data $tag threads 16 (40 copies): rc=$? $(grep -E 'images/s:|per CPU' "$OUT/data_${tag}_16.log" | tr '\n' ' ')"
        done
        bin/vil bench-data --data corpus --threads 1 --batches 10 --stages > "$OUT/data_stages.log" 2>&1
        grep -E "decode|resize|whole" "$OUT/data_stages.log"
        ;;
    train:*)
        # `vil train` with the real loader and the full recipe on the big corpus, 60 steps, then
        # `vil eval` of the result on 10,240 of its images: train:CFG:BATCH[:VIL[:K=V,K=V]]
        # (VIL: another build's binary, e.g. .old/bin/vil, to compare; K=V: more --set keys).
        # The GPU's SM clock, power and utilization are sampled every 250 ms meanwhile.
        big_corpus
        cfg=$(echo "$step" | cut -d: -f2); bs=$(echo "$step" | cut -d: -f3)
        vil=$(echo "$step" | cut -s -d: -f4); sets=$(echo "$step" | cut -s -d: -f5)
        vil=${vil:-bin/vil}; tag=$(basename "$cfg" .cfg)_$(echo "$vil$sets" | tr -c 'a-z0-9\n' '_')
        extra=""; for kv in $(echo "$sets" | tr ',' ' '); do extra="$extra --set $kv"; done
        R=/tmp/vil_tp_$tag; rm -rf $R
        nvidia-smi --query-gpu=clocks.sm,power.draw,utilization.gpu --format=csv,noheader,nounits -lms 250 > "$OUT/smi_$tag.log" 2>&1 &
        smi=$!
        $vil train --config "$cfg" --data $BIG --device cuda --out $R --set num_classes=10 --set batch=$bs \
            --set workers=14 --set epochs=1 --set max_steps=60 --set warmup_epochs=0 --set log_every=10 --set eval_every_epochs=0 \
            $extra > "$OUT/train_$tag.log" 2>&1
        rc=$?; kill $smi 2>/dev/null
        echo "train $cfg batch $bs with $vil $extra: rc=$rc; GPU (median of samples at >50% utilization): $(awk -F', ' '$3 > 50 {print $1, $2}' "$OUT/smi_$tag.log" | sort -n | awk '{a[NR]=$0} END {print "SM MHz, W:", a[int((NR+1)/2)], "of", NR, "samples"}')"
        grep -E "img/s" "$OUT/train_$tag.log" | cut -c1-140
        $vil eval --device cuda --model $R/last.safetensors --data $BIG --split train --batch $bs \
            --workers 14 --limit 10240 > "$OUT/eval_$tag.log" 2>&1
        echo "eval with $vil: rc=$?"; tail -2 "$OUT/eval_$tag.log"
        ;;
    scaling:*)
        # issue 19's protocol on this host: scaling:CFG:BATCH:NPS[:STEPS:GLOBAL] (NPS the process
        # counts, comma-separated, e.g. 1,2,4,8; one process per GPU, NCCL_NVLS_ENABLE=0). Per
        # count: `mpirun -np N vil bench --data` (the step over the ranks from in-memory batches,
        # the scaling efficiency, then vil train's loop with the JPEG loader) and 60 steps of
        # `mpirun -np N vil train` on the JPEGs at BATCH per GPU (its img/s over the last 30). Then
        # the loss curves at one global batch (GLOBAL, default 128) over STEPS (default 200): N
        # processes with GLOBAL / N each, against 1; where the host has fewer than N GPUs, one
        # GPU with N micro-batches of GLOBAL / N (the same samples and split of the sum, without
        # NCCL), said so; Mixup and CutMix off there (they mix each process's own batch, as timm's
        # do on each GPU, so N processes train on other mixtures than one: measured 4-6% apart in
        # the windows below with them on); and the 1-GPU run once more (run-to-run differences: the floor under the
        # others). `vil plot --agree 3 --window 50` compares each with the first (NPS starts at 1):
        # the tolerance set from one GPU's runs before any multi-GPU one (cuda/PERF_NOTES.md,
        # session 15: micro-batches alone moved the 50-step means 1.7 / 2.4%). mpirun with
        # --bind-to none throughout: its default binds 1-2 ranks to one core each, which starves
        # the loader (vil train warns of it).
        big_corpus
        cfg=$(echo "$step" | cut -d: -f2); bs=$(echo "$step" | cut -d: -f3); nps=$(echo "$step" | cut -d: -f4)
        steps=$(echo "$step" | cut -s -d: -f5); G=$(echo "$step" | cut -s -d: -f6); steps=${steps:-200}; G=${G:-128}
        tag=$(basename "$cfg" .cfg); ngpu=$(nvidia-smi -L | wc -l); ncpu=$(nproc)
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
        echo "scaling $tag: $ngpu GPUs ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)), $ncpu CPUs; $(bin/vil help | tail -1)"
        R=/tmp/vil_scaling_$tag; rm -rf $R; mkdir -p $R
        common="--set num_classes=10 --set eval_every_epochs=0 --set warmup_epochs=0"
        # the loader alone on all of this host's CPUs: what it can feed the GPUs with
        bin/vil bench-data --data $BIG --threads $ncpu --batch 128 --batches 100 > "$OUT/scaling_data.log" 2>&1
        echo "loader alone, $ncpu threads (the full training transform): $(grep -E 'images/s' "$OUT/scaling_data.log" | head -2 | tr '\n' ' ')"
        for np in $(echo "$nps" | tr ',' ' '); do
            [ "$np" -gt "$ngpu" ] && { echo "np $np: $ngpu GPUs here, speed not measured"; continue; }
            w=$((ncpu / np - 1)); [ $w -lt 1 ] && w=1
            mpirun -np $np --bind-to none bin/vil bench --device cuda --model "$cfg" --batch $bs --set num_classes=10 \
                --set workers=$w --data $BIG > "$OUT/scaling_bench_${tag}_np$np.log" 2>&1
            echo "np $np: mpirun vil bench batch $bs/GPU, $w loader threads/GPU: rc=$?"
            grep -E "alone|all ranks|all [0-9]+ ranks|one process|efficiency|warning" "$OUT/scaling_bench_${tag}_np$np.log" | sed 's/^/  /'
            mpirun -np $np --bind-to none bin/vil train --config "$cfg" --data $BIG --device cuda --out $R/speed_np$np $common \
                --set batch=$bs --set workers=$w --set epochs=$((60 * bs * np / 16200 + 1)) --set max_steps=60 --set log_every=10 \
                > "$OUT/scaling_train_${tag}_np$np.log" 2>&1
            echo "  mpirun -np $np vil train (JPEGs, batch $bs/GPU): rc=$?, img/s at steps 40-60 (all GPUs):" \
                "$(grep -E '"step":(40|50|60),' $R/speed_np$np/metrics.jsonl | sed 's/.*"images_per_s":\([0-9.]*\).*/\1/' | tr '\n' ' ')"
        done
        # the loss curves at one global batch
        runs=""; labels=""
        for np in $(echo "$nps" | tr ',' ' ') again; do
            # again: the 1-GPU run repeated (is the run deterministic: the floor under the others)
            if [ "$np" = again ]; then how="1 GPU, repeated"; launch=""; acc=1; lab="1gpu_again"; np=1
            elif [ "$np" -le "$ngpu" ]; then how="mpirun -np $np"; launch="mpirun -np $np --bind-to none"; acc=1; lab="${np}gpu"
            else how="1 GPU, $np micro-batches"; launch=""; acc=$np; lab="1gpu_x${np}micro"; fi
            $launch bin/vil train --config "$cfg" --data $BIG --device cuda --out $R/curve_$lab $common \
                --set batch=$((G / np)) --set accum_steps=$acc --set workers=$((ncpu / (np <= ngpu ? np : 1) - 1)) \
                --set epochs=3 --set max_steps=$steps --set log_every=1 --set mixup=0 --set cutmix=0 \
                > "$OUT/scaling_curve_${tag}_$lab.log" 2>&1
            echo "curve $lab ($how, global batch $G): rc=$?, last loss $(tail -1 $R/curve_$lab/metrics.jsonl | sed 's/.*"loss":\([0-9.]*\).*/\1/')"
            runs="$runs $R/curve_$lab"; labels="$labels --label $lab"
            cp $R/curve_$lab/metrics.jsonl "$OUT/curve_${tag}_$lab.jsonl"
        done
        bin/vil plot $runs $labels --agree 3 --window 50 --out "$OUT/curves_$tag.svg" | grep -E "worst|nothing"
        ;;
    res:*)
        # vil bench's table across resolutions and batches, and DeiT (timm, eager) at the same
        # resolutions: res:CFG:SIZES:BATCHES:PEER (sizes and batches comma-separated; PEER the
        # timm model, at the batches too)
        cfg=$(echo "$step" | cut -d: -f2); sz=$(echo "$step" | cut -d: -f3); bs=$(echo "$step" | cut -d: -f4)
        peer=$(echo "$step" | cut -s -d: -f5)
        bin/vil bench --device cuda --model "$cfg" --img-size "$sz" --batch "$bs" --steps 10 > "$OUT/res_$(basename "$cfg" .cfg).log" 2>&1
        echo "vil bench --img-size $sz --batch $bs: rc=$?"; cat "$OUT/res_$(basename "$cfg" .cfg).log"
        for r in $(echo "$sz" | tr ',' ' '); do for b in $(echo "$bs" | tr ',' ' '); do
            [ -n "$peer" ] && python3 dev/peers/bench_timm.py --model "$peer" --img-size $r --batch $b --steps 10 --warmup 3 2>&1 | tail -1 | sed 's/; torch.*//'
        done; done
        ;;
    tfevents)
        # vil's TensorBoard files against the tensorboard package (pip's, here): its readers on
        # vil's copy of the reference scalars; the reference rewritten by its writer must still
        # equal vil's records (test_tfevents on it); then the e2e run's events as it reads them
        make -j16 build/tests/test_tfevents >> "$OUT/build.log" 2>&1
        VIL_TFEVENTS_OUT=$OUT/tfe build/tests/test_tfevents > "$OUT/tfe_test.log" 2>&1
        echo "test_tfevents: $(tail -1 "$OUT/tfe_test.log")"
        python3 tests/reference/make_tfevents.py --check $OUT/tfe > "$OUT/tfe_check.log" 2>&1
        echo "tensorboard $(python3 -c 'import tensorboard; print(tensorboard.__version__)') reads vil's file: $(tail -1 "$OUT/tfe_check.log")"
        cp tests/data/tfevents/reference.tfevents /tmp/ref_keep.tfevents
        python3 tests/reference/make_tfevents.py > /dev/null 2>&1
        echo "reference rewritten by this tensorboard, test_tfevents on it: $(build/tests/test_tfevents 2>&1 | tail -1)"
        cp /tmp/ref_keep.tfevents tests/data/tfevents/reference.tfevents
        [ -d /tmp/vil_e2e ] && python3 tests/reference/make_tfevents.py --dump /tmp/vil_e2e > "$OUT/tfe_e2e.log" 2>&1 \
            && echo "e2e run's events: $(grep -c . "$OUT/tfe_e2e.log") scalars; $(grep -E 'val/top1' "$OUT/tfe_e2e.log" | tail -1)" \
            && ls /tmp/vil_e2e && cp /tmp/vil_e2e/curves.svg /tmp/vil_e2e/metrics.jsonl /tmp/vil_e2e/run.jsonl "$OUT/"
        ;;
    mpi:*)
        # under mpirun, one process per GPU (NP of them, default 1: world size 1 through the whole
        # NCCL path on one GPU): vil bench's table of the step over the ranks plus vil train's loop
        # on the big corpus, then 60 steps of vil train: mpi:CFG:BATCH[:NP]
        big_corpus
        cfg=$(echo "$step" | cut -d: -f2); bs=$(echo "$step" | cut -d: -f3); np=$(echo "$step" | cut -s -d: -f4)
        np=${np:-1}; tag=$(basename "$cfg" .cfg)_np$np
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
        echo "$(bin/vil help | tail -1)"
        mpirun -np $np --bind-to none bin/vil bench --device cuda --model "$cfg" --batch $bs --set num_classes=10 \
            --set workers=$((14 / np)) --data $BIG > "$OUT/mpi_bench_$tag.log" 2>&1
        echo "mpirun -np $np vil bench $cfg batch $bs: rc=$?"; grep -vE "^step:" "$OUT/mpi_bench_$tag.log" | tail -14
        R=/tmp/vil_mpi_$tag; rm -rf $R
        mpirun -np $np --bind-to none bin/vil train --config "$cfg" --data $BIG --device cuda --out $R --set num_classes=10 \
            --set batch=$bs --set workers=$((14 / np)) --set epochs=1 --set max_steps=60 --set warmup_epochs=0 \
            --set log_every=20 --set eval_every_epochs=0 > "$OUT/mpi_train_$tag.log" 2>&1
        echo "mpirun -np $np vil train: rc=$?"; grep -E "ranks:|img/s|done" "$OUT/mpi_train_$tag.log" | cut -c1-150
        ;;
    peer_longhorn)
        # the Longhorn authors' scan beside vil's scan harness at ViL-Tiny's shapes, both checked
        # against one float64 reference (carry .peers: dev/peers/longhorn_build.sh,
        # dev/peers/bench_longhorn.py)
        make -j16 build/dev/cuda/scan build/tools/scan_dump >> "$OUT/build.log" 2>&1 \
            || { echo "peer_longhorn: vil's build failed"; tail -20 "$OUT/build.log"; continue; }
        sh dev/peers/longhorn_build.sh > "$OUT/peer_longhorn_build.log" 2>&1 \
            || { echo "peer_longhorn: the extension did not build"; tail -25 "$OUT/peer_longhorn_build.log"; continue; }
        cat "$OUT/peer_longhorn_build.log"
        python3 dev/peers/bench_longhorn.py > "$OUT/peer_longhorn.log" 2>&1
        echo "peer_longhorn: rc=$?"; grep -vE "^(vil cpu|emulated authors) .* OK$" "$OUT/peer_longhorn.log" | tail -40
        ;;
    peer:*)
        # the timm peer in the same call: peer:MODEL:BATCH[:compile] (dev/peers/bench_timm.py)
        name=$(echo "$step" | cut -d: -f2); bs=$(echo "$step" | cut -d: -f3)
        cmp=$(echo "$step" | cut -s -d: -f4)
        python3 dev/peers/bench_timm.py --model "$name" --batch "$bs" ${cmp:+--compile} \
            > "$OUT/peer_${name}_$bs${cmp:+_c}.log" 2>&1
        echo "peer $name: rc=$?"; tail -1 "$OUT/peer_${name}_$bs${cmp:+_c}.log"
        ;;
    bench:*)
        cfg=$(echo "$step" | cut -d: -f2); bs=$(echo "$step" | cut -d: -f3)
        log="$OUT/bench_$(basename "$cfg" .cfg)_$bs.log"
        bin/vil bench --device cuda --model "$cfg" --batch "$bs" > "$log" 2>&1
        echo "bench $cfg batch $bs: rc=$?"
        cat "$log"
        ;;
    esac
done
