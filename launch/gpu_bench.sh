#!/bin/bash
# pedrl's GPU figures in one run, written to one results file and a summary table of every
# figure against its goal; its default steps' time limits add up to 8 minutes (sized from
# runs on one H100; a step that ends early leaves the rest unused).
#
#   bash launch/gpu_bench.sh                 # on a GPU machine, pedrl installed (pip install .[test])
#   bash launch/gpu_bench.sh --tiny          # the same steps at tiny shapes on CPU (a dry run)
#   PEDRL_GPU_BENCH_OUT=/path bash launch/gpu_bench.sh
#   PEDRL_GPU_BENCH_STEPS="sampling rollout_cold ..." bash launch/gpu_bench.sh   # only these
#   PEDRL_GPU_BENCH_SECONDS=540 bash launch/gpu_bench.sh   # cut steps short to end by then
#
# Default steps, each under its own time limit (a step past it is recorded as timed out
# and the others still run):
#   1. sampling: Qwen2.5-7B-shaped bf16 decode, batch 1 and 16 (HBM utilization), then
#      each traced once: its longest XLA ops (pedrl.bench.profile);
#   2. sampling_fused_qkv: the same decode with one matmul for q, k and v
#      (ModelConfig.qkv_matmul="fused"), traced too;
#   3. rollout, bench shape (26M models) against transformers on the same GPU, 6
#      messages, with a fresh persistent compilation cache and program store (cold warm-up);
#   4. the same rollout again, 6 messages: its programs come from that cache (warm);
#   5. one GRPO update at Qwen2.5-1.5B, layers unrolled, whole sequences attending
#      through cuDNN's fused attention (traced like step 1);
#   6. the GPU test subset (JAX_PLATFORMS=cuda: what runs differently on a GPU, below).
# Options, run only when PEDRL_GPU_BENCH_STEPS names them: rollout_7b+8b (rollouts at
# paper 003's shapes: a Qwen2.5-7B tutor with a Llama-3.1-8B student, their stacks
# trimmed to 4 layers), train_step_0.5b and train_step_7b_4_layers (the update at
# Qwen2.5-0.5B, and at 7B trimmed to 4 layers), rollout_cold_scan and rollout_warm_scan
# (steps 3 and 4 with scanned layers), rollout_cold_autotune0 (step 3 with XLA's
# autotuning off), train_step_1.5b_scanned (the 1.5B update with scanned layers, the
# jobs' default: copies of the scan's stacked activations), rollout_qwen2.5-0.5b
# (Qwen2.5-0.5B on both sides) and train_step_1.5b_einsum (the 1.5B update with the
# einsum attention's float32 [T, T] probabilities), and after the tests sampling_pallas
# (step 1 with the Pallas decode-attention kernel, at 4096 cache slots too), rollout_cold_quick
# and rollout_warm_quick (steps 3 and 4 with scanned layers, XLA's GEMM autotuning off
# and cuBLAS's GEMMs instead of Triton's: the shortest compiles), and job_warm (the tiny
# rollout job cold, then after `pedrl.tools.warm` filled its caches).
# Results: $PEDRL_GPU_BENCH_OUT (default ./gpu_bench_results)/gpu_bench_DATE.txt, with
# the date, device, versions and commit, every step's output, and the summary table
# (pedrl.bench.gpu_summary; also alone in gpu_summary_DATE.md, the file
# docs/includes/gpu_bench.md is a copy of); the traced calls in traces_DATE/ beside it
# (gzipped .xplane.pb, for TensorBoard's or XProf's viewers). docs/performance.md lists
# the goals.
set -uo pipefail
cd "$(dirname "$0")/.."
tiny=0
[[ "${1:-}" == "--tiny" || "${PEDRL_GPU_BENCH_TINY:-0}" == "1" ]] && tiny=1
python=${PYTHON:-python}
out_dir=${PEDRL_GPU_BENCH_OUT:-gpu_bench_results}
mkdir -p "$out_dir"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
results="$out_dir/gpu_bench_$stamp.txt"
# Fresh, and outside the results folder: step 2's warm-up compiles, step 3's loads.
cache="${TMPDIR:-/tmp}/pedrl_gpu_bench_jax_cache_$stamp"
# transformers shares the GPU with jax in the rollout steps: jax allocates as it goes
# instead of taking 75% of the memory at start.
export XLA_PYTHON_CLIENT_PREALLOCATE=false TOKENIZERS_PARALLELISM=false

# PEDRL_GPU_BENCH_SECONDS: the whole run's limit (a device lent for so long); steps that
# would run past it are cut short or skipped, and the summary is still written.
deadline=${PEDRL_GPU_BENCH_SECONDS:-0}
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "PEDRL_GPU_BENCH_SECONDS=$deadline: expected whole seconds" >&2; exit 2; }
scale=1  # Time limits are an H100's; a CPU dry run gets more.
if (( tiny )); then
  export JAX_PLATFORMS=cpu
  scale=${PEDRL_GPU_BENCH_TINY_SCALE:-8}
  torch_device=cpu test_platform=cpu
  sampling=(--gpu_size=tiny --new_tokens=8 --repeats=1)
  rollout=(--size=tiny --dialogues=2 --tokens_per_turn=8 --repeats=1 --engines=transformers_kv,pedrl)
  real_small=(--size=tiny --engines=transformers_kv,pedrl) real_paper=("${real_small[@]}")
  train_small=(--size=tiny --seq_len=128 --rows=4 --micro_batch=2 --repeats=1 --noscan_layers)
  train_mid=("${train_small[@]}") train_big=("${train_small[@]}")
  train_einsum=("${train_small[@]}" --full_attention=einsum)
  tests=(tests/bench/test_transformers_version.py tests/bench/test_train_step_bench.py
         tests/models/test_full_attention.py -m "not job")
else
  torch_device=cuda test_platform=cuda
  sampling=(--gpu_size=qwen2.5-7b --repeats=2)
  # transformers without a cache is left out on the GPU: it only costs time (a 6-message
  # rollout at the bench shape took as long as with its cache, 2.2 s, on an H100).
  rollout=(--size=bench --repeats=1 --engines=transformers_kv,pedrl)
  real_small=(--size=qwen2.5-0.5b --engines=transformers_kv,pedrl)
  real_paper=(--size=7b+8b --layers=4 --engines=transformers_kv,pedrl)
  # Micro-batches as large as pedrl.rl.memory's plan fits in 95% of 80 GB with the fused
  # attention and the loss head in 1024-position chunks (the trainer's default): 0.5B at 8
  # rows 55 GiB (68.5, little margin, with the whole head), 1.5B at 4 rows 73.6 GiB: 2;
  # with the einsum
  # attention, 4 rows' probabilities alone (float32, every layer kept for the backward)
  # are 21 GiB at 0.5B and 2048 tokens: micro-batch 1.
  # Layers unrolled: on an H100 (2026-11-27) the 1.5B update took 0.93 s against 1.23 s
  # scanned, whose loop copied its stacked activations (memcpy, 13% of the step).
  train_small=(--size=qwen2.5-0.5b --seq_len=2048 --rows=16 --micro_batch=8 --repeats=2
               --noscan_layers)
  train_mid=(--size=qwen2.5-1.5b --seq_len=2048 --rows=16 --micro_batch=2 --repeats=2
             --noscan_layers)
  train_big=(--size=qwen2.5-7b --layers=4 --seq_len=2048 --rows=8 --micro_batch=4 --repeats=2
             --noscan_layers)
  train_einsum=(--size=qwen2.5-1.5b --seq_len=2048 --rows=16 --micro_batch=1 --repeats=2
                --full_attention=einsum --noscan_layers)
  # The tests of what runs differently on a GPU (the ports' parity, cuDNN's attention, the
  # bfloat16 head, the decode attention and its kernel, the sampling filters, the traces):
  # the engine's logic is the same on every platform, and the CPU suite covers it.
  tests=(tests/models/test_decoder_parity.py tests/models/test_full_attention.py
         tests/models/test_head_logprobs.py tests/models/test_attention_blocks.py
         tests/engine/test_distribution.py tests/bench/test_bench_profile.py
         -m "not job" --durations=10)
  # Most of the tests' time is compiling: eight workers when pytest-xdist is there.
  "$python" -c "import xdist" 2>/dev/null && tests+=(-n 8)
fi

{
  echo "pedrl GPU benchmark, $stamp$( (( tiny )) && echo ' (DRY RUN: tiny shapes on CPU)')"
  # PEDRL_COMMIT names the commit where the tree travels without its git folder.
  echo "commit: ${PEDRL_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')}"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
  "$python" - <<'EOF'
import jax, jaxlib, torch, transformers
print(f"devices: {jax.devices()}")
print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, torch {torch.__version__} "
      f"(cuda {torch.version.cuda}), transformers {transformers.__version__}")
EOF
} > "$results" 2>&1

named() { [[ " ${PEDRL_GPU_BENCH_STEPS:-} " == *" $1 "* ]]; }
step() {  # step NAME SECONDS COMMAND...: runs COMMAND under a time limit, output to $results.
  local name=$1 limit=$(( $2 * scale )); shift 2
  [[ -z "${PEDRL_GPU_BENCH_STEPS:-}" ]] || named "$name" || return 0
  if (( deadline )); then  # No step runs past the whole run's limit (30 s kept for the summary).
    local left=$(( deadline - SECONDS - 30 ))
    if (( left < 15 )); then
      echo "=== $name: SKIPPED (PEDRL_GPU_BENCH_SECONDS=$deadline reached)" | tee -a "$results"
      return 0
    fi
    (( limit > left )) && limit=$left
  fi
  local start=$SECONDS status
  { echo; echo "=== $name (limit ${limit}s): $*"; } >> "$results"
  timeout --kill-after=10 "$limit" "$@" >> "$results" 2>&1
  status=$?
  local verdict=ok
  (( status == 124 || status == 137 )) && verdict="TIMED OUT"
  (( status != 0 && status != 124 && status != 137 )) && verdict="FAILED (exit $status)"
  echo "=== $name: $verdict in $((SECONDS - start)) s" >> "$results"
  echo "$name: $verdict in $((SECONDS - start)) s"
}

option() {  # option NAME SECONDS COMMAND...: a step that runs only when PEDRL_GPU_BENCH_STEPS names it.
  named "$1" && step "$@"
  return 0
}

cc=(--compilation_cache="$cache")
# The decode and the 1.5B update are traced once more after timing: their longest XLA ops
# (pedrl.bench.profile) go to the results, the traces beside them (gzipped .xplane.pb).
traces="$out_dir/traces_$stamp"
prof=(--profile_top=25 --trace_dir="$traces")
# The training steps share the GPU with nothing: jax may take 95% of it, not its default 75%
# (also its limit when it allocates as it goes).
train_env=(XLA_PYTHON_CLIENT_MEM_FRACTION=0.95)
# The decode's compiled programs (XLA's HLO after optimization, as text) go beside its
# traces, in decode_hlo.tar.gz: they name the model code behind each kernel of the profile.
hlo_dump() {  # hlo_dump FOLDER: XLA_FLAGS that dump the decode's programs to $traces/FOLDER.
  echo "XLA_FLAGS=${XLA_FLAGS:-} --xla_dump_to=$traces/$1 --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*_generate.*"
}
step sampling 100 env "$(hlo_dump decode_hlo)" "$python" -m pedrl.bench.sampling "${cc[@]}" --device_profile=gpu \
    --gpu_cache_slots=0 "${prof[@]}" "${sampling[@]}"
# The decode with one matmul for q, k and v (ModelConfig.qkv_matmul), against the
# sampling step's separate ones; its trace and HLO beside theirs (decode_hlo_fused_qkv).
step sampling_fused_qkv 80 env "$(hlo_dump decode_hlo_fused_qkv)" "$python" -m pedrl.bench.sampling \
    "${cc[@]}" --device_profile=gpu --gpu_cache_slots=0 --qkv_matmul=fused \
    --profile_top=25 --trace_dir="$traces/fused_qkv" "${sampling[@]}"
step rollout_cold 70 "$python" -m pedrl.bench.rollout "${cc[@]}" "${rollout[@]}" \
    --messages=6 --torch_device=$torch_device
step rollout_warm 30 "$python" -m pedrl.bench.rollout "${cc[@]}" "${rollout[@]}" \
    --messages=6 --torch_device=$torch_device
# Options: scanned layers (one compiled layer body, the jobs' default) and XLA's GEMM
# autotuning off, each from a fresh cache, against the two steps above.
option rollout_cold_scan 90 "$python" -m pedrl.bench.rollout --compilation_cache="$cache.scan" \
    "${rollout[@]}" --messages=6 --torch_device=$torch_device --scan_layers
option rollout_warm_scan 40 "$python" -m pedrl.bench.rollout --compilation_cache="$cache.scan" \
    "${rollout[@]}" --messages=6 --torch_device=$torch_device --scan_layers
option rollout_cold_autotune0 90 env XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" \
    "$python" -m pedrl.bench.rollout --compilation_cache="$cache.autotune0" "${rollout[@]}" \
    --messages=6 --torch_device=$torch_device
# An option: run C's did not exit after its last line (2026-11-26).
option rollout_qwen2.5-0.5b 180 "$python" -m pedrl.bench.rollout "${cc[@]}" "${real_small[@]}" \
    --messages=6 --repeats=1 --torch_device=$torch_device
option rollout_7b+8b 150 "$python" -m pedrl.bench.rollout "${cc[@]}" "${real_paper[@]}" \
    --messages=6 --repeats=1 --torch_device=$torch_device
option train_step_0.5b 80 env "${train_env[@]}" "$python" -m pedrl.bench.train_step "${cc[@]}" "${train_small[@]}"
step train_step_1.5b 80 env "${train_env[@]}" "$python" -m pedrl.bench.train_step "${cc[@]}" \
    "${prof[@]}" "${train_mid[@]}"
option train_step_1.5b_scanned 60 env "${train_env[@]}" "$python" -m pedrl.bench.train_step "${cc[@]}" \
    "${prof[@]}" "${train_mid[@]}" --scan_layers
option train_step_7b_4_layers 50 env "${train_env[@]}" "$python" -m pedrl.bench.train_step "${cc[@]}" "${train_big[@]}"
option train_step_1.5b_einsum 100 env "${train_env[@]}" "$python" -m pedrl.bench.train_step "${cc[@]}" \
    "${train_einsum[@]}"
step tests 120 env JAX_PLATFORMS=$test_platform "$python" -m pytest -q -p no:cacheprovider \
    "${tests[@]}"
# An option after the tests: the decode with the Pallas flash-decoding kernel for its
# attention over the cache (ModelConfig.decode_attention), traced.
option sampling_pallas 90 "$python" -m pedrl.bench.sampling "${cc[@]}" --device_profile=gpu \
    --gpu_cache_slots=0,4096 --decode_attention=pallas --profile_top=25 \
    --trace_dir="$traces/pallas" "${sampling[@]}"
# Options after the tests: the rollout with everything that shortens compiling (scanned
# layers, XLA's GEMM autotuning off, cuBLAS instead of Triton for the GEMMs), from a fresh
# cache and again from it, against rollout_cold and rollout_warm.
quick_xla="${XLA_FLAGS:-} --xla_gpu_autotune_level=0 --xla_gpu_enable_triton_gemm=false"
option rollout_cold_quick 70 env XLA_FLAGS="$quick_xla" "$python" -m pedrl.bench.rollout \
    --compilation_cache="$cache.quick" "${rollout[@]}" --messages=6 --torch_device=$torch_device \
    --scan_layers
option rollout_warm_quick 30 env XLA_FLAGS="$quick_xla" "$python" -m pedrl.bench.rollout \
    --compilation_cache="$cache.quick" "${rollout[@]}" --messages=6 --torch_device=$torch_device \
    --scan_layers
# An option: the tiny rollout job's first run from empty caches, then pedrl.tools.warm
# filling fresh ones and the job again from them (it should compile nothing).
job_warm() {
  set -o pipefail
  local job=(--config=experiments/rollout.py:tiny --config.problems.limit=2) t
  t=$SECONDS; "$python" -m pedrl.experiments.rollout "${job[@]}" --workdir="$cache.job/cold" \
    --compilation_cache="$cache.job/cold_cache" | tail -2 || return
  echo "job_cold_s=$((SECONDS - t))"
  t=$SECONDS; "$python" -m pedrl.tools.warm "${job[@]}" --compilation_cache="$cache.job/cache" \
    | tail -4 || return
  echo "warm_tool_s=$((SECONDS - t))"
  t=$SECONDS; "$python" -m pedrl.experiments.rollout "${job[@]}" --workdir="$cache.job/warm" \
    --compilation_cache="$cache.job/cache" | tail -2 || return
  echo "job_after_warm_s=$((SECONDS - t))"
}
export -f job_warm; export python cache
option job_warm 150 bash -c job_warm

{
  echo; echo "=== summary (the benchmarks' last lines, in step order)"
  grep -E '^(decode_hbm_utilization_batch[0-9]+|rollout_speedup_vs_transformers_kv|rollout_warmup_s|rollout_compile_s|train_step_mfu)=|^pedrl programs|^pedrl +[0-9]|^(update|score) |^=== [^ ]+: |^profile |^traced call|^kinds: |passed|failed' "$results" \
    | grep -v '^=== summary'
} >> "$results"
summary="$out_dir/gpu_summary_$stamp.md"
"$python" -m pedrl.bench.gpu_summary "$results" > "$summary"
{ echo; echo "=== figures against their goals"; cat "$summary"; } >> "$results"
cat "$summary"
rm -rf "$cache" "$cache".*
[[ -d "$traces" ]] && find "$traces" -name '*.xplane.pb' -exec gzip -f {} +
for hlo in decode_hlo decode_hlo_fused_qkv; do  # The HLO text alone (XLA dumps object code too).
  [[ -d "$traces/$hlo" ]] || continue
  (cd "$traces" && find "$hlo" -name '*after_optimizations.txt' | tar czf "$hlo.tar.gz" -T -)
  rm -rf "${traces:?}/$hlo"
done
echo "results: $results $summary"
