#!/usr/bin/env bash
# Multiple-choice evaluation end to end on the shipped task file: in the training loop
# (eval.tasks, eval.every, eval.limit: {"event":"eval",...} records and their TensorBoard
# tags) and zt-eval on the run's checkpoint and its Hugging Face export, at np 1 and 2
# (the same counts), with --output.
# Usage: test_eval.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"
export OMP_WAIT_POLICY=PASSIVE
make_corpus
task="$SRC/inputs/tasks/tiny_choice.jsonl"
MPI2=(mpiexec --oversubscribe --bind-to none -x OMP_WAIT_POLICY -np 2)

expect 0 "eval tiny_choice: n 20 +acc [0-9.]+ +acc_norm [0-9.]+ +acc_token [0-9.]+" \
  "$BIN/ztrain" --config "$SRC/inputs/tiny.ini" --data.train="$work/data/train_*.bin" --run.dir="$work/run" \
  --train.threads=1 --train.max_steps=4 --train.sample_tokens=0 --eval.tasks="$task" --eval.every=2 --eval.limit=20
# Records at steps 0, 2 and 4, with n = 20 and fractions in [0, 1] that are multiples of 1/20.
check "eval records at steps 0, 2, 4" python3 - "$work/run/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"eval"' in l]
assert [r["step"] for r in recs] == [0, 2, 4], recs
for r in recs:
    assert r["task"] == "tiny_choice" and r["n"] == 20, r
    for k in ("acc", "acc_norm", "acc_token"):
        assert 0 <= r[k] <= 1 and abs(r[k] * 20 - round(r[k] * 20)) < 1e-9, r
PY
# TensorBoard: the event file equals metrics.jsonl, eval records as eval/<task>/<field>.
check "TensorBoard event file equals metrics.jsonl" python3 "$SRC/tests/cli/read_tfevents.py" check "$work/run"
check "TensorBoard tag eval/tiny_choice/acc_norm" bash -c \
  "python3 '$SRC/tests/cli/read_tfevents.py' dump '$work'/run/tb/events.* | grep -q 'eval/tiny_choice/acc_norm='"

# zt-eval on the checkpoint, one rank and two: the same numbers (counts summed over ranks).
expect 0 "tiny_choice: n 32 " "$BIN/zt-eval" "$work/run/checkpoints" --tasks "$task" --threads 1 \
  --output "$work/np1.json"
expect 0 "tiny_choice: n 32 " "${MPI2[@]}" "$BIN/zt-eval" "$work/run/checkpoints" --tasks "$task" --threads 1 \
  --output "$work/np2.json"
# Its Hugging Face export (tokenizer given: zt-consolidate writes none for the byte tokenizer).
"$BIN/zt-consolidate" "$work/run/checkpoints" --output "$work/hf/" > /dev/null || { echo "FAIL: zt-consolidate"; exit 1; }
expect 0 "tiny_choice: n 32 " "$BIN/zt-eval" "$work/hf" --tasks "$task" --tokenizer "$work/data/tokenizer.json" \
  --threads 1 --output "$work/hf.json"
check "same counts at np 1 and 2 and from the export" python3 - "$work/np1.json" "$work/np2.json" "$work/hf.json" <<'PY'
import json, sys
r = [json.load(open(f)) for f in sys.argv[1:]]
assert [x["world_size"] for x in r] == [1, 2, 1], r
keys = ("n", "acc", "acc_norm", "acc_token")
t = [{k: x["tasks"]["tiny_choice"][k] for k in keys} for x in r]
assert t[0] == t[1] == t[2], t
assert r[0]["tasks"]["tiny_choice"]["examples_per_s"] > 0
PY

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all zt-eval / eval.tasks checks passed"
