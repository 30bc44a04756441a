#!/usr/bin/env bash
# A LoRA run's checkpoint and its resume, two ztrain builds side by side (issue 51): each
# trains 2 steps from DECK (a LoRA deck, e.g. the config.ini bench/lora_bench.sh's ztrain
# runs leave, whose base is model.init_from), saves, and resumes to step 3. Prints per build
# the checkpoint's bytes and write time, the peak RSS of the run and of the resume, and the
# step-3 loss (which must be equal).
#   bash bench/lora_checkpoint.sh OLD_BIN_DIR NEW_BIN_DIR DECK [WORK]
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OLD=$1 NEW=$2 DECK=$3 WORK=${4:-/tmp/lora_checkpoint}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$WORK" && mkdir -p "$WORK"
for side in old new; do
  bin=$OLD; [ "$side" = new ] && bin=$NEW
  run=(--config "$DECK" --run.dir="$WORK/$side" --checkpoint.every=0)
  "$bin/ztrun" 2 "$bin/ztrain" "${run[@]}" --train.max_steps=2 --checkpoint.resume=never > "$WORK/$side.log" 2>&1
  "$bin/ztrun" 2 "$bin/ztrain" "${run[@]}" --train.max_steps=3 --checkpoint.resume=auto > "$WORK/$side.resume.log" 2>&1
  python3 - "$WORK/$side" "$side" <<'PY'
import json, re, sys
run, side = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(run + "/metrics.jsonl")]
ck = [r for r in recs if r.get("event") == "checkpoint" and r["step"] == 2][0]
loss = [r["loss"] for r in recs if r.get("step") == 3 and "loss" in r][-1]
peak = lambda f: re.search(r"peak resident memory ([0-9.]+) MiB", open(f).read()).group(1)
print(f"{side}: checkpoint {ck['bytes']} bytes, write {ck['write_ms']:.0f} ms; peak RSS run {peak(run + '.log')} MiB, "
      f"resume {peak(run + '.resume.log')} MiB; step-3 loss {loss!r}")
PY
  rm -rf "$WORK/$side/checkpoints"
done
