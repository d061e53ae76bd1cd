#!/usr/bin/env bash
# One session on the GPU machine: build the CUDA parts, run the GPU tests, the tiny-checkpoint goldens through
# mmgw-run --backend cuda, the kernel benchmarks, the PyTorch baselines and the whole-model benchmark, all in
# one command (device time is scarce). Everything lands in $OUT: log (the full console), *.tsv (one line per
# measurement) and eval.tar.gz (mmgw-run outputs).
#
#   OUT=/some/dir bench/cuda/device_run.sh [steps...]     steps: build tests goldens sass bench torch model moe
#                                                         layers (not in the default list)
#
# Build inputs: the standalone CMake project bench/cuda/device (-DSNAP/-DJANSSON_ROOT) so that only the CUDA
# toolkit, libc and a carried libjansson are needed there. Prepare here, then carry .carry:
#   bench/cuda/device_prepare.sh      (libjansson debs extracted, a snapshot of the runtime, the tiny goldens)
# Run from the repository root.
set -u
OUT=${OUT:-/tmp/mmgw-out}
mkdir -p "$OUT"
ROOT=$(pwd)
B=${MMGW_CUDA_BUILD:-/tmp/mmgw-cuda-build} # a prebuilt tree (bin/, tests/, lib/) may be carried
STEPS=${*:-build tests goldens sass bench torch model moe}
LOG=$OUT/log
export LD_LIBRARY_PATH=$ROOT/.carry/debroot/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export MMGW_TESTDATA=${MMGW_TESTDATA:-$ROOT/../shared/testdata}
[ -d "$MMGW_TESTDATA" ] || MMGW_TESTDATA=$ROOT/.carry/testdata
log() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
run() { # run NAME TIMEOUT CMD...: console into the log, status reported
    local name=$1 t=$2
    shift 2
    log "$name: $*"
    timeout "$t" "$@" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    log "$name: exit $rc"
    return "$rc"
}
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

log "steps: $STEPS"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
        --format=csv
    nvcc --version | tail -2
    cmake --version | head -1
    uname -r
    nproc
} 2>&1 | tee -a "$LOG"

if has build; then
    run configure 120 cmake -S bench/cuda/device -B $B -DCMAKE_BUILD_TYPE=Release -DSNAP="$ROOT/.carry/snap" \
        -DJANSSON_ROOT="$ROOT/.carry/debroot" || exit 1
    run build 300 cmake --build $B -j"$(nproc)" || exit 1
fi

if has tests; then
    run test_ops 120 $B/tests/test_kn_cuda_ops ||
        run sanitize_ops 180 compute-sanitizer --tool memcheck --print-limit 20 $B/tests/test_kn_cuda_ops
    run test_msa 240 $B/tests/test_kn_cuda_msa ||
        run sanitize_msa 240 compute-sanitizer --tool memcheck --print-limit 20 $B/tests/test_kn_cuda_msa
    MMGW_BUILD=$B run test_goldens 300 python3 tests/unit/kernels_cuda/test_cuda_goldens.py
fi

if has goldens; then
    G=$MMGW_TESTDATA/m3-tiny-a
    mkdir -p /tmp/eval
    run golden_cpu 120 $B/bin/mmgw-run --model "$G" --eval "$G/goldens.safetensors" --out /tmp/eval/cpu.safetensors \
        --backend cpu
    run golden_cuda_bf16 120 $B/bin/mmgw-run --model "$G" --eval "$G/goldens.safetensors" \
        --out /tmp/eval/cuda_bf16.safetensors --backend cuda
    MMGW_CUDA_PRECISION=fp32 run golden_cuda_fp32 120 $B/bin/mmgw-run --model "$G" --eval "$G/goldens.safetensors" \
        --out /tmp/eval/cuda_fp32.safetensors --backend cuda
    MMGW_CUDA_PRECISION=fp32 MMGW_CUDA_INDEX=fp8 run golden_cuda_fp8idx 120 $B/bin/mmgw-run --model "$G" \
        --eval "$G/goldens.safetensors" --out /tmp/eval/cuda_fp32_fp8idx.safetensors --backend cuda
    for f in cpu cuda_bf16 cuda_fp32 cuda_fp32_fp8idx; do
        [ -f /tmp/eval/$f.safetensors ] || continue
        log "compare $f with the goldens"
        python3 tests/unit/runtime/compare_eval.py "$G/goldens.safetensors" /tmp/eval/$f.safetensors 2>&1 | tee -a "$LOG"
        log "compare $f with the CPU backend"
        python3 tests/unit/runtime/compare_eval.py /tmp/eval/cpu.safetensors /tmp/eval/$f.safetensors 2>&1 | tee -a "$LOG"
    done
    tar -czf "$OUT/eval.tar.gz" -C /tmp eval 2>/dev/null
fi

if has sass; then
    # what the compiler made of the hot kernels: tensor-core, cluster and dependent-launch instructions
    cuobjdump -sass $B/lib/libkn_cuda.a >/tmp/kn_cuda.sass 2>&1
    awk '/Function :/{f=$3} /HMMA|HGMMA|UCGABAR|ACQBULK|CCTL|PREEXIT|LDSM|LDGSTS|ATOMG|RED\./{split($2,a,".");
        n[f" "a[1]]++} END{for(k in n) print k, n[k]}' /tmp/kn_cuda.sass | grep -E "k_attn_decode|k_index_decode|k_topk" |
        sort | tee -a "$LOG"
fi

if has bench; then
    # KN_BENCH_ARGS, e.g. "--only index,layer": a shorter second run
    run kn_bench 420 $B/bin/kn_bench ${KN_BENCH_ARGS:-} --out "$OUT/kn_bench.tsv"
fi

if has torch; then
    # TORCH_ARGS="--decode-only" skips the dense prefill baselines (a minute) when only decode is measured
    PYTHONUNBUFFERED=1 run torch 240 python3 bench/cuda/torch_baseline.py ${TORCH_ARGS:-} --out "$OUT/torch.tsv"
fi

if has model; then
    S=/tmp/synth
    rm -rf $S
    # M3's attention and index shapes (hidden 6144, 64 heads, 4 KV groups, head 128, index 4 x 128, block 128,
    # top-16), 4 MSA layers with small dense MLPs, no vision; context raised to 1M + margin
    run mkdemo 120 $B/bin/mmgw-mkdemo --out $S --set hidden=6144 --set layers=4 --set heads=64 --set kv_heads=4 \
        --set head_dim=128 --set rot_dim=64 --set idx_heads=4 --set idx_dim=128 --set block=128 --set topk_blocks=16 \
        --set attn_pattern=ssss --set mlp_pattern=dddd --set dense_inter=2048 --set no_vision=1
    sed -i 's/"max_position_embeddings": *524288/"max_position_embeddings": 1100000/' $S/config.json
    run model_bench 300 $B/bin/model_bench --model $S --ctx ${MODEL_CTX:-32768,131072,1048576} \
        --batch ${MODEL_BATCH:-1,16} --steps 32 --pages ${MODEL_PAGES:-20000} --out "$OUT/model.tsv"
fi

if has moe; then
    M=/tmp/synthmoe
    rm -rf $M
    # the same attention with MoE layers (16 experts, top 4, expert MLP 1024, a shared expert) at hidden 4096:
    # the routes of bench/cuda/README.md "Whole-model decode" (per-pair products, grouped on the device)
    run mkdemo_moe 180 $B/bin/mmgw-mkdemo --out $M --set hidden=4096 --set layers=4 --set heads=32 --set kv_heads=4 \
        --set head_dim=128 --set rot_dim=64 --set idx_heads=4 --set idx_dim=128 --set block=128 --set topk_blocks=16 \
        --set attn_pattern=ssss --set mlp_pattern=mmmm --set experts=16 --set topk_experts=4 --set inter=1024 \
        --set shared_inter=1024 --set no_vision=1
    run model_bench_moe 120 $B/bin/model_bench --model $M --ctx 32768 --batch ${MOE_BATCH:-1,4,16} --steps 64 \
        --pages 8000 --out "$OUT/model_moe.tsv"
fi
if has layers; then
    # the MSA decode layer at the model's contexts and batches with a page set per sequence, the default split
    # count against the previous one (bench/cuda/README.md "Whole-model decode, fourth session")
    for ctx in ${LAYER_CTX:-32768 131072}; do
        for b in ${LAYER_BATCH:-4 8 16 32 64}; do
            KN_BENCH_DEC_CTX=$ctx KN_BENCH_DEC_BATCH=$b KN_BENCH_DEC_OWN=1 KN_BENCH_DEC_ROUTES="fused|fused, waves" \
                run layer_${ctx}_b$b 120 $B/bin/kn_bench --only layerdec --out "$OUT/layer_${ctx}_b$b.tsv"
        done
    done
fi
log "done"
