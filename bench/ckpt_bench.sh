#!/usr/bin/env bash
# Checkpoint benchmark: the save time of the GPT-2 124M state at N = 2 (ZeRO-1: each rank
# writes its half of master weights + AdamW m, v) next to a raw write of the same bytes on
# the same disk by two parallel writers with fsync (goal: save <= 2x raw), then
# zt-consolidate of that checkpoint to .safetensors and .h5: time and peak RSS.
#
#   bash bench/ckpt_bench.sh
#
# Knobs: REPS (3), BUILD_DIR (build-bench), OUT (results file), WORK (bench/work/ckpt).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-3}"
BUILD_DIR="${BUILD_DIR:-build-bench}"
DATE="$(date +%F)"
OUT="${OUT:-bench/results/ckpt_${DATE}.md}"
WORK="${WORK:-bench/work/ckpt}"
mkdir -p "$WORK" bench/results
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=OFF > "$WORK/build.log" 2>&1
cmake --build "$BUILD_DIR" -j2 --target ztrain zt-consolidate >> "$WORK/build.log" 2>&1
[ -f "$WORK/train.bin" ] || /usr/bin/python3 bench/make_shard.py "$WORK/train.bin" 200000 50257

MODEL=(--model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.seq_len=64
       --model.vocab_size=50257 --model.vocab_pad_to=128)
save_s=()
raw_s=()
bytes=0
for rep in $(seq 1 "$REPS"); do
  run="$WORK/run$rep"
  rm -rf "$run"
  mpiexec --bind-to none -np 2 "$BUILD_DIR/bin/ztrain" "${MODEL[@]}" --data.train="$WORK/train.bin" \
    --train.micro_batch=1 --train.max_steps=1 --train.eval_every=0 --train.sample_tokens=0 --train.threads=1 \
    --parallel.zero_stage=1 --run.dir="$run" --checkpoint.resume=never > "$run.log" 2>&1
  s=$(sed -n 's/.*checkpoint .* written in \([0-9.]*\) s/\1/p' "$run.log" | tail -1)
  save_s+=("$s")
  step=$(cat "$run/checkpoints/latest")
  bytes=$(du -cb "$run/checkpoints/$step"/*.h5 | tail -1 | cut -f1)
  # Raw: the same bytes, two writers in parallel (one per rank's share), each fsynced.
  half=$(( bytes / 2 / 1048576 ))
  rm -f "$WORK/raw0" "$WORK/raw1"
  sync
  t0=$(date +%s.%N)
  dd if=/dev/zero of="$WORK/raw0" bs=1M count="$half" conv=fsync status=none &
  dd if=/dev/zero of="$WORK/raw1" bs=1M count="$half" conv=fsync status=none &
  wait
  t1=$(date +%s.%N)
  raw_s+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')")
  rm -f "$WORK/raw0" "$WORK/raw1"
  echo "rep $rep: save ${s} s, raw ${raw_s[-1]} s, ${bytes} bytes" >&2
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
save_med=$(median "${save_s[@]}")
raw_med=$(median "${raw_s[@]}")

ckpt="$WORK/run1/checkpoints"
consolidate() {  # OUTPUT [ARGS] -> "seconds peak_kib"
  /usr/bin/time -v "$BUILD_DIR/bin/zt-consolidate" "$ckpt" --output "$@" > "$WORK/consolidate.log" 2>&1
  local wall rss
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$WORK/consolidate.log")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$WORK/consolidate.log")
  echo "$wall $rss"
}
read -r st_wall st_rss < <(consolidate "$WORK/model.safetensors")
read -r h5_wall h5_rss < <(consolidate "$WORK/model.h5")
read -r bf_wall bf_rss < <(consolidate "$WORK/model_bf16.safetensors" --dtype bf16)
st_bytes=$(stat -c %s "$WORK/model.safetensors")

{
  echo "# Checkpoint save and consolidation"
  echo
  echo "- command: \`bash bench/ckpt_bench.sh\` (REPS=$REPS)"
  echo "- date: $(date -u '+%F %T UTC'), git $(git rev-parse --short HEAD)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; disk: $(df -h "$WORK" | tail -1 | awk '{print $1}')"
  echo "- state: GPT-2 124M (12 x 768, vocab 50257 padded 50304), fp32 master + AdamW m, v, N = 2, ZeRO-1"
  echo "  (each rank writes its shard); $bytes bytes of shard files"
  echo
  echo "## Save vs raw write (median of $REPS)"
  echo
  echo "| | seconds (per rep) | median | ratio |"
  echo "|---|---|---|---|"
  echo "| ztrain save (shards + meta + fsync + rename + latest) | ${save_s[*]} | $save_med | $(awk -v a="$save_med" -v b="$raw_med" 'BEGIN{printf "%.2fx raw", a/b}') |"
  echo "| raw: 2 x dd of the same bytes, conv=fsync, in parallel | ${raw_s[*]} | $raw_med | 1.00x |"
  echo
  echo "## zt-consolidate (streams one tensor at a time)"
  echo
  echo "| output | wall | peak RSS MiB | largest tensor (wte, fp32) MiB |"
  echo "|---|---|---|---|"
  echo "| fp32 .safetensors ($((st_bytes / 1048576)) MiB) | $st_wall | $((st_rss / 1024)) | $((50257 * 768 * 4 / 1048576)) |"
  echo "| fp32 .h5 | $h5_wall | $((h5_rss / 1024)) | |"
  echo "| bf16 .safetensors | $bf_wall | $((bf_rss / 1024)) | |"
} > "$OUT"
cat "$OUT"
