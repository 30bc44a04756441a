#!/usr/bin/env bash
# The time plan at the papers' scale (issue 53): published configurations as decks on the
# shipped cluster files, each one's predicted step against the published throughput. Runs
# ztrain --plan only (seconds; nothing is trained).
#
# 1. Megatron-LM's 2021 weak-scaling table (Narayanan et al., "Efficient Large-Scale Language
#    Model Training on GPU Clusters Using Megatron-LM", SC21, Table 1: GPT, vocabulary 51200,
#    sequence 2048, A100 80GB DGX nodes with 8 x 200 Gb/s HDR, fp16 mixed precision,
#    activation recomputation, attention scores materialised): inputs/clusters/a100_node.ini,
#    the predicted step turned into teraFLOP/s per GPU with the paper's own count (its Eq. 3,
#    recompute included: 96 B s l h^2 (1 + s/6h + V/16lh)).
# 2. torchtitan's FSDP2 reports (github.com/pytorch/torchtitan, docs/performance.md): Llama 2
#    and 3 on 64 A100 80GB (commit 041336434916bdc0f88c1f89fda176fd3c2092e4 of that file) and
#    Llama 3.1 8B on 8 and 128 H100 96GB HBM2e (commit eaea6f6a2fa940f03a10906be1df3489cf30af85;
#    the rows without Float8, which ztrain does not model). FSDP2 = ZeRO-3 with bf16
#    parameters and fp32 reductions; PyTorch's SDPA is a fused (flash) attention kernel:
#    --cluster.attention_kernel=fused. Tokens/s per GPU, as published.
# 3. IBM and Meta's FSDP report (github.com/foundation-model-stack/fms-fsdp, README.md at
#    commit 0d319983c4b3b7f7b3b5e2c5e7f746746b6f73a9, its table of Llama 2 7B-70B on 128
#    A100 80GB; the PyTorch blog "Maximizing training throughput using PyTorch FSDP",
#    2024-03-13, gives the network: "400Gbps network connectivity and GPU direct RDMA", read
#    here as 400 Gb/s a node, AWS p4de's EFA, the cluster its scripts name; sequence 4096).
#    FSDP1 with bf16 parameters and bf16 reductions; HSDP = ZeRO-3 within a node, replicated
#    across nodes (parallel.shard_group = 8); FSDP = over all 128 ranks; PyTorch SDPA's flash
#    kernel, eager element-wise ops; activation checkpointing True = every block.
# 4. MosaicML's MPT benchmarks (github.com/mosaicml/llm-foundry, scripts/train/benchmarking/
#    README.md at commit 495218376830947dce625efabc4d86be7c47cc45; the A100 80GB and H100 80GB
#    tables were made at commit b2a43a1477a45f40f4086a1c72f851b0ab42d0ac, whose sweep.sh and
#    submit_benchmarks.py give the settings): every bf16 row, copied to
#    bench/planner_papers_mosaicml.txt. MPT as benchmarked is GPT-2's architecture (learned
#    positions, biases, LayerNorm, tied head; NumParams checks each shape), vocabulary 50368,
#    Composer's FSDP (FULL_SHARD = ZeRO-3 over all ranks; mixed precision DEFAULT = fp32
#    reductions, PURE = bf16), activation checkpointing = every block. Its block runs one kernel
#    per op that ztrain also runs as one (low-precision LayerNorm, exact GELU, fused
#    cross-entropy; no head copies around the Triton kernel): cluster.elementwise = fused. Its
#    attention is llm-foundry's Triton FlashAttention (attn_impl = triton): the FlashAttention-2
#    paper (Dao, 2023) measures FlashAttention-2 1.3-1.5x faster than FlashAttention in Triton in
#    the forward pass and about 2x in the backward; with FlashAttention-2 at 0.6 of the A100's
#    peak (a100_node.ini) and the plan's backward at 2.5 forwards, that is 0.6 x 3.5 / (1.4 +
#    2 x 2.5) = 0.33 (the same paper puts FlashAttention (v1) at 25-40%). On H100 the same ratio
#    applied to FlashAttention-2's 35% (FlashAttention-3 paper, arXiv:2407.08608): 0.19.
#
#   bash bench/planner_papers.sh [--out FILE]     (repository root; needs build/bin/ztrain)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=""
if [ "${1:-}" = "--out" ]; then OUT=$2; fi
BIN=build/bin

# predict FLAGS...: sets step_ms and bottleneck from ztrain --plan, or returns 1.
predict() {
  local out
  out=$("$BIN/ztrain" --data.train=none.bin "$@" --plan 2>&1) || { echo "plan failed: $(tail -2 <<<"$out")" >&2; return 1; }
  step_ms=$(grep -oE "^predicted step: [0-9.]+" <<<"$out" | grep -oE "[0-9.]+$")
  bottleneck=$(grep -oE "bottleneck: [a-z -]+" <<<"$out" | cut -d' ' -f2-)
}

# params(B) heads hidden layers t p gpus batch published-TFLOP/s-per-GPU
megatron=(
  "1.7 24 2304 24 1 1 32 512 137"
  "3.6 32 3072 30 2 1 64 512 138"
  "7.5 32 4096 36 4 1 128 512 142"
  "18.4 48 6144 40 8 1 256 1024 135"
  "39.1 64 8192 48 8 2 512 1536 138"
  "76.1 80 10240 60 8 4 1024 1792 140"
  "145.6 96 12288 80 8 8 1536 2304 148"
  "310.1 128 16384 96 8 16 1920 2160 155"
  "529.6 128 20480 105 8 35 2520 2520 163"
  "1008.0 160 25600 128 8 64 3072 3072 163"
)
table="Megatron-LM 2021, Table 1 (teraFLOP/s per GPU, the paper's count)

| model | T | P | GPUs | batch | published | predicted | error | bottleneck |
|---|---|---|---|---|---|---|---|---|"
for row in "${megatron[@]}"; do
  read -r params heads hidden layers t p gpus batch published <<<"$row"
  data=$((gpus / (t * p)))
  accum=$((batch / data))
  schedule=1f1b
  # Megatron's interleaved schedule where the layers allow two chunks per stage.
  if [ "$p" -gt 1 ] && [ $((layers % (2 * p))) -eq 0 ] && [ $((accum % p)) -eq 0 ]; then schedule=interleaved; fi
  predict --model.arch=gpt2 --model.n_layer="$layers" --model.n_head="$heads" \
    --model.n_embd="$hidden" --model.seq_len=2048 --model.vocab_size=51200 --model.vocab_pad_to=128 \
    --precision.dtype=bf16 --train.recompute=true --train.micro_batch=1 --train.grad_accum="$accum" \
    --parallel.tensor="$t" --parallel.pipeline="$p" --parallel.schedule="$schedule" \
    --cluster inputs/clusters/a100_node.ini --cluster.nodes=$((gpus / 8)) || continue
  line=$(python3 -c "
B, s, l, h, V, n = $batch, 2048, $layers, $hidden, 51200, $gpus
flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
tf = flops / ($step_ms / 1e3) / n / 1e12
print(f'| GPT {$params}B | $t | $p ($schedule) | $gpus | $batch | $published | {tf:.0f} | {100 * (tf - $published) / $published:+.0f}% |')")
  table+=$'\n'"$line $bottleneck |"
done

# name | cluster flags | model flags | local batch | recompute | published tokens/s per GPU | AC as published
llama3_8b="--model.n_layer=32 --model.n_embd=4096 --model.n_head=32 --model.n_kv_head=8 --model.ffn_dim=14336 --model.vocab_size=128256 --model.seq_len=8192"
llama3_70b="--model.n_layer=80 --model.n_embd=8192 --model.n_head=64 --model.n_kv_head=8 --model.ffn_dim=28672 --model.vocab_size=128256 --model.seq_len=8192"
llama2_13b="--model.n_layer=40 --model.n_embd=5120 --model.n_head=40 --model.n_kv_head=40 --model.ffn_dim=13824 --model.vocab_size=32000 --model.seq_len=4096"
llama2_70b="--model.n_layer=80 --model.n_embd=8192 --model.n_head=64 --model.n_kv_head=8 --model.ffn_dim=28672 --model.vocab_size=32000 --model.seq_len=4096"
a100x64="inputs/clusters/a100_node.ini --cluster.nodes=8"
# Grand Teton: H100 with 96 GB HBM2e at 2.4 TB/s, 400 Gb/s per GPU (as the report states).
h100x8="inputs/clusters/h100_node.ini --cluster.nodes=1 --cluster.memory_gbps=2400 --cluster.memory_gib=88"
h100x128="inputs/clusters/h100_node.ini --cluster.nodes=16 --cluster.memory_gbps=2400 --cluster.memory_gib=88"
torchtitan=(
  "Llama 3 8B|$a100x64|$llama3_8b|1|selective_op|2973|selective op"
  "Llama 3 70B|$a100x64|$llama3_70b|1|true|331|full"
  "Llama 2 13B|$a100x64|$llama2_13b|2|false|2162|none"
  "Llama 2 70B|$a100x64|$llama2_70b|2|true|353|full"
  "Llama 3.1 8B|$h100x8|$llama3_8b|2|selective_op|5762|selective op"
  "Llama 3.1 8B|$h100x128|$llama3_8b|2|selective_op|5605|selective op"
)
table+="

torchtitan FSDP2 (tokens/s per GPU; bf16, fp32 reductions, fused attention). Predicted twice:
with ztrain's element-wise kernels (cluster.elementwise = fused), and with one kernel per op as
eager PyTorch runs torchtitan's block (eager); selective op checkpointing as torchtitan's policy
(cluster.activation_checkpointing = selective_op). The error is the eager prediction's.

| model | GPUs | local batch | activation checkpointing | published | predicted (fused) | predicted (eager) | error | bottleneck |
|---|---|---|---|---|---|---|---|---|"
for row in "${torchtitan[@]}"; do
  IFS='|' read -r name cluster model batch recompute published ac <<<"$row"
  checkpointing=deck
  if [ "$recompute" = selective_op ]; then checkpointing=selective_op; recompute=false; fi
  steps=()
  for elementwise in fused eager; do
    # shellcheck disable=SC2086
    predict --model.arch=llama $model --precision.dtype=bf16 --precision.reduce_dtype=fp32 \
      --train.micro_batch="$batch" --train.grad_accum=1 --train.recompute="$recompute" --parallel.zero_stage=3 \
      --parallel.shard_group=0 --cluster $cluster --cluster.attention_kernel=fused --cluster.elementwise=$elementwise \
      --cluster.activation_checkpointing=$checkpointing || continue 2
    steps+=("$step_ms")
  done
  gpus=$(grep -oE "cluster.nodes=[0-9]+" <<<"$cluster" | cut -d= -f2)
  gpus=$((gpus * 8))
  seq=$(grep -oE "seq_len=[0-9]+" <<<"$model" | cut -d= -f2)
  line=$(python3 -c "
fused, eager = ($batch * $seq / (ms / 1e3) for ms in (${steps[0]}, ${steps[1]}))
print(f'| $name | $gpus | $batch | $ac | $published | {fused:.0f} | {eager:.0f} | {100 * (eager - $published) / $published:+.0f}% |')")
  table+=$'\n'"$line $bottleneck |"
done
# name | sharding | model flags | local batch | recompute | published tokens/s per GPU
llama2_7b="--model.n_layer=32 --model.n_embd=4096 --model.n_head=32 --model.n_kv_head=32 --model.ffn_dim=11008 --model.vocab_size=32000 --model.seq_len=4096"
llama2_34b="--model.n_layer=48 --model.n_embd=8192 --model.n_head=64 --model.n_kv_head=8 --model.ffn_dim=22016 --model.vocab_size=32000 --model.seq_len=4096"
fms=(
  "Llama 2 7B|HSDP|$llama2_7b|2|false|3760"
  "Llama 2 13B|HSDP|$llama2_13b|1|false|1700"
  "Llama 2 34B|FSDP|$llama2_34b|8|true|772"
  "Llama 2 70B|FSDP|$llama2_70b|6|true|380"
)
table+="

IBM/Meta fms-fsdp on 128 A100 80GB, 400 Gb/s a node (tokens/s per GPU; bf16 parameters and
reductions, fused attention, eager element-wise ops). HSDP shards within a node
(parallel.shard_group = 8), FSDP over all ranks (0). The error is the eager prediction's; the
last column is the eager prediction with 400 Gb/s a GPU (the blog's figure read the other way).

| model | sharding | local batch | activation checkpointing | published | predicted (fused) | predicted (eager) | error | bottleneck | eager at 400 Gb/s a GPU |
|---|---|---|---|---|---|---|---|---|---|"
for row in "${fms[@]}"; do
  IFS='|' read -r name sharding model batch recompute published <<<"$row"
  group=8
  if [ "$sharding" = FSDP ]; then group=0; fi
  steps=()
  for variant in fused eager eager_gpu_link; do
    elementwise=${variant%%_*}
    inter=50
    if [ "$variant" = eager_gpu_link ]; then inter=400; fi
    # shellcheck disable=SC2086
    predict --model.arch=llama $model --precision.dtype=bf16 --precision.reduce_dtype=bf16 \
      --train.micro_batch="$batch" --train.grad_accum=1 --train.recompute="$recompute" --parallel.zero_stage=3 \
      --parallel.shard_group=$group --cluster inputs/clusters/a100_node.ini --cluster.nodes=16 \
      --cluster.inter_gbps=$inter --cluster.attention_kernel=fused --cluster.elementwise=$elementwise || continue 2
    steps+=("$step_ms")
    if [ "$variant" = eager ]; then eager_bottleneck=$bottleneck; fi
  done
  line=$(python3 -c "
fused, eager, gpu_link = ($batch * 4096 / (ms / 1e3) for ms in (${steps[0]}, ${steps[1]}, ${steps[2]}))
print(f'| $name | $sharding | $batch | $recompute | $published | {fused:.0f} | {eager:.0f} | {100 * (eager - $published) / $published:+.0f}% | $eager_bottleneck | {gpu_link:.0f} |')")
  table+=$'\n'"$line"
done
# MosaicML's MPT rows: name, sequence, GPUs, GPU, micro-batch, accumulation, published tokens/s
# per GPU, precision, mixed precision mode, activation checkpointing, NumParams.
declare -A mpt_shape=([125m]="768 12 12" [350m]="1024 16 24" [760m]="1536 12 24" [1b]="2048 16 24"
  [3b]="2560 20 32" [7b]="4096 32 32" [13b]="5120 40 40" [30b]="7168 64 48" [70b]="8192 64 80")
mpt_rows=""
while read -r name seq gpus gpu mb accum published _precision mp checkpointing nparams; do
  read -r hidden heads layers <<<"${mpt_shape[$name]}"
  # GPT-2's parameters: blocks with biases, tied embedding, learned positions, final norm.
  shape_params=$((12 * layers * hidden * hidden + 50368 * hidden + seq * hidden + 9 * layers * hidden + 2 * (2 * layers + 1) * hidden))
  if [ "$shape_params" -ne "$nparams" ]; then echo "MPT $name at $seq: $shape_params parameters, published $nparams" >&2; exit 1; fi
  reduce=fp32
  if [ "$mp" = PURE ]; then reduce=bf16; fi
  if [ "$gpu" = a100_80gb ]; then cluster=inputs/clusters/a100_node.ini; attention=0.33; else cluster=inputs/clusters/h100_node.ini; attention=0.19; fi
  predict --model.arch=gpt2 --model.n_layer="$layers" --model.n_head="$heads" --model.n_embd="$hidden" \
    --model.seq_len="$seq" --model.vocab_size=50368 --model.vocab_pad_to=64 --precision.dtype=bf16 \
    --precision.reduce_dtype=$reduce --train.micro_batch="$mb" --train.grad_accum="$accum" \
    --train.recompute="${checkpointing,,}" --parallel.zero_stage=3 --parallel.shard_group=0 --cluster $cluster \
    --cluster.nodes=$((gpus / 8)) --cluster.attention_kernel=fused --cluster.attention_efficiency=$attention \
    --cluster.elementwise=fused || continue
  mpt_rows+="$name $seq $gpus $gpu $mb $accum ${checkpointing,,} $published $step_ms ${bottleneck// /_}"$'\n'
done < <(grep -v '^#' bench/planner_papers_mosaicml.txt)
table+=$'\n\n'$(python3 - "$mpt_rows" <<'PY'
import statistics, sys
rows = [r.split() for r in sys.argv[1].strip().split("\n")]
out = ["MosaicML MPT (tokens/s per GPU; FSDP FULL_SHARD, bf16, fused element-wise ops as MPT's block runs them,",
       "Triton FlashAttention at 0.33 of the peak on A100 and 0.19 on H100). Every row of the three bf16 tables.", "",
       "| model | GPU | GPUs | sequence | micro-batch x accumulation | activation checkpointing | published | predicted | error | bottleneck |",
       "|---|---|---|---|---|---|---|---|---|---|"]
errors = {}
for name, seq, gpus, gpu, mb, accum, ac, published, step_ms, bottleneck in rows:
    predicted = int(mb) * int(accum) * int(seq) / (float(step_ms) / 1e3)
    error = 100 * (predicted - int(published)) / int(published)
    errors.setdefault(gpu, []).append((error, ac))
    out.append(f"| MPT {name} | {gpu.split('_')[0].upper()} | {gpus} | {seq} | {mb} x {accum} | {ac} | {published} | {predicted:.0f} | {error:+.0f}% | {bottleneck.replace('_', ' ')} |")
out.append("")
def summary(label, e):
    within = sum(abs(x) <= 20 for x in e)
    return f"- {label}: {within} of {len(e)} within 20%, median error {statistics.median(e):+.1f}% (absolute {statistics.median(abs(x) for x in e):.1f}%)"
for gpu, e in errors.items():
    out.append(summary(gpu.split('_')[0].upper(), [x for x, _ in e]))
    for ac in ("true", "false"):
        out.append("  " + summary(f"activation checkpointing {ac}", [x for x, a in e if a == ac]))
print("\n".join(out))
PY
)
echo "$table"
if [ -n "$OUT" ]; then echo "$table" > "$OUT"; fi
