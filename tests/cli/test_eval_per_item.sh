#!/usr/bin/env bash
# zt-eval --per-item, and one answer at any world size and batch: a tiny GPT trained 40 steps
# at np 2 (with the in-loop evaluation), then zt-eval --per-item at np 1, 2 and 3 and --batch
# 1, 3 and 8 on a 41-item HellaSwag-layout task (41: no rank count divides it). The task has
# endings of very different lengths (one word to longer than the window), endings sharing
# prefixes, and a repeated ending that the model prefers (a tie that a rounding difference
# between the two copies' forwards would break).
# Usage: test_eval_per_item.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"
export OMP_WAIT_POLICY=PASSIVE
make_corpus
task="$work/fox41.jsonl"
python3 - "$task" <<'PY'
import json, random, sys
r = random.Random(49)
words = "kettle water stove sink tea cup man woman quick brown lazy dog".split()
phrase = lambda lo, hi: " ".join(r.choice(words) for _ in range(r.randint(lo, hi)))
with open(sys.argv[1], "w") as f:
    for i in range(41):
        if i % 3 == 0:  # the corpus' own line, its ending twice; the label is either copy
            ctx_a, ctx_b = f"the quick brown fox {i + 1}", ""
            good = "jumps over the lazy dog"
            endings = [phrase(1, 2) + ".", good, phrase(3, 6), good]
            label = 1 if i % 2 else 3
        else:
            ctx_a, ctx_b = phrase(4, 12) + ".", phrase(1, 2)
            stem = phrase(1, 2)  # shared by every ending: a common prefix
            endings = [stem + " " + phrase(0, n) + "." for n in (1, 3, 8, 30)]
            r.shuffle(endings)
            label = r.randint(0, 3)
        f.write(json.dumps({"ind": i, "activity_label": "Fox", "ctx_a": ctx_a, "ctx_b": ctx_b,
                            "endings": endings, "label": str(label), "split": "val"}) + "\n")
PY
MPI=(mpiexec --oversubscribe --bind-to none -x OMP_WAIT_POLICY -np)

expect 0 "step 40 \| eval fox41: n 41 " "${MPI[@]}" 2 "$BIN/ztrain" --config "$SRC/inputs/tiny.ini" \
  --data.train="$work/data/train_*.bin" --run.dir="$work/run" --train.threads=1 --train.max_steps=40 \
  --train.sample_tokens=0 --eval.tasks="$task"
# --threads 1 throughout: a product split over another number of threads may round otherwise.
for np in 1 2 3; do
  for b in 1 3 8; do
    expect 0 "fox41: n 41 " "${MPI[@]}" $np "$BIN/zt-eval" "$work/run/checkpoints" --tasks "$task" --threads 1 \
      --batch $b --output "$work/np${np}_b$b.json" --per-item "$work/np${np}_b$b.jsonl"
  done
done
expect 2 "--per-item $work/no/such.jsonl: directory '$work/no' does not exist" "$BIN/zt-eval" \
  "$work/run/checkpoints" --tasks "$task" --per-item "$work/no/such.jsonl"

check "per-item lines and metrics equal at np 1, 2, 3 and --batch 1, 3, 8" python3 - "$work" "$task" <<'PY'
import json, sys
work, task = sys.argv[1], sys.argv[2]
items = [json.loads(l) for l in open(task)]
lines = {(np, b): open(f"{work}/np{np}_b{b}.jsonl").read() for np in (1, 2, 3) for b in (1, 3, 8)}
for (np, b), text in lines.items():  # the same bytes at any world size
    assert text == lines[(1, b)], f"--batch {b}: np {np}'s per-item lines differ from np 1's"
def pick(scores, value):  # the first of equal values, as zt-eval
    return max(range(len(scores)), key=lambda k: (value(scores[k]), -k))
def counts(recs):
    c = [0, 0, 0]
    for r in recs:
        s = list(zip(r["loglik"], r["chars"], r["tokens"]))
        for j, value in enumerate((lambda e: e[0], lambda e: e[0] / e[1], lambda e: e[0] / e[2])):
            c[j] += pick(s, value) == r["label"]
    return c
want = {}
for b in (1, 3, 8):
    recs = [json.loads(l) for l in lines[(1, b)].splitlines()]
    assert [r["index"] for r in recs] == list(range(41)), [r["index"] for r in recs]
    for r, it in zip(recs, items):
        assert r["task"] == "fox41" and r["label"] == int(it["label"]), r
        ends = [e.strip() for e in it["endings"]]
        assert r["chars"] == [len(e) for e in ends], (r, ends)  # the harness's len(choice)
        # Byte tokens of " " + ending, at most seq_len (32) of them scored.
        assert r["tokens"] == [min(len((" " + e).encode()), 32) for e in ends], (r, ends)
        for k, e in enumerate(ends):  # a repeated ending: scored once, an exact tie
            first = ends.index(e)
            assert r["loglik"][k] == r["loglik"][first], f"--batch {b} item {r['index']}: {r['loglik']}"
    if b == 1:
        ref = recs
    # Other batches: other product shapes, so fp32 rounding may differ (measured: < 1e-7).
    worst = max(abs(x - y) / abs(y) for r, q in zip(recs, ref) for x, y in zip(r["loglik"], q["loglik"]))
    assert worst < 1e-6, f"--batch {b}: log-likelihoods differ from --batch 1's by {worst:.3g} (relative)"
    for r, q in zip(recs, ref):
        assert (r["chars"], r["tokens"]) == (q["chars"], q["tokens"]), (r, q)
    n = 41
    got = json.load(open(f"{work}/np1_b{b}.json"))["tasks"]["fox41"]
    assert [round(got[k] * n) for k in ("acc", "acc_norm", "acc_token")] == counts(recs), (got, counts(recs))
    for np in (1, 2, 3):
        res = json.load(open(f"{work}/np{np}_b{b}.json"))
        assert res["world_size"] == np
        t = {k: res["tasks"]["fox41"][k] for k in ("n", "acc", "acc_norm", "acc_token")}
        want.setdefault("metrics", t)
        assert t == want["metrics"], f"np {np} --batch {b}: {t}, np 1 --batch 1: {want['metrics']}"
# The in-loop evaluation at np 2 (rows per forward: train.micro_batch) counts the same.
rec = [json.loads(l) for l in open(f"{work}/run/metrics.jsonl") if '"eval"' in l][-1]
assert {k: rec[k] for k in ("n", "acc", "acc_norm", "acc_token")} == want["metrics"], (rec, want)
print("metrics", want["metrics"], "; largest relative log-likelihood difference across batches <", 1e-6)
PY

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all zt-eval --per-item checks passed"
