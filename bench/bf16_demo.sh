#!/usr/bin/env bash
# The demo deck (inputs/demo.ini) for STEPS steps in fp32 and then in bf16, everything else
# equal, and their curves side by side: the bf16 run's final validation loss should be within
# 2% of the fp32 run's. Prints a markdown section (append it to a bench/results file).
#
#   bash bench/bf16_demo.sh            # knobs: STEPS (300), NP (2), BIN (build/bin), WORK (bench/work/bf16_demo)
#
# Needs the fortunes corpus (fortunes-min, as inputs/demo.sh); the data is prepared in WORK.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STEPS="${STEPS:-300}"
NP="${NP:-2}"
BIN="$(cd "${BIN:-$ROOT/build/bin}" && pwd)"
WORK="${WORK:-$ROOT/bench/work/bf16_demo}"
mkdir -p "$WORK" && cd "$WORK"
[ -f data/fortunes/tokenizer.json ] ||
    "$BIN/zt-prepare" --input /usr/share/games/fortunes --output data/fortunes --tokenizer byte \
        --doc-separator % --val-fraction 0.05 > prepare.log
for dt in fp32 bf16; do
    rm -rf "run/demo_$dt"
    /usr/bin/time -v -o "time_$dt.txt" "$BIN/ztrun" "$NP" "$BIN/ztrain" --config "$ROOT/inputs/demo.ini" \
        --train.max_steps="$STEPS" --precision.dtype="$dt" --run.dir="run/demo_$dt" > "log_$dt.txt" 2>&1 ||
        { tail -20 "log_$dt.txt"; exit 1; }
done
/usr/bin/python3 - "$STEPS" "$NP" <<'PY'
import json, re, sys
steps, np_ = sys.argv[1], sys.argv[2]
runs = {}
for dt in ("fp32", "bf16"):
    rows = [json.loads(l) for l in open(f"run/demo_{dt}/metrics.jsonl") if l.strip()]
    time_txt = open(f"time_{dt}.txt").read()
    wall = re.search(r"Elapsed \(wall clock\).*: (\S+)", time_txt).group(1)
    notes = [l.strip() for l in open(f"log_{dt}.txt") if "note:" in l]
    runs[dt] = dict(val={r["step"]: r["val_loss"] for r in rows if "val_loss" in r},
                    loss={r["step"]: r["loss"] for r in rows if "loss" in r}, wall=wall, notes=notes)
f, b = runs["fp32"], runs["bf16"]
last = max(f["val"])
print(f"## {steps}-step demo deck, fp32 vs bf16 ({np_} ranks, `bash bench/bf16_demo.sh`)\n")
print(f"Final validation loss: fp32 {f['val'][last]:.4f}, bf16 {b['val'][last]:.4f}: "
      f"bf16 / fp32 = {b['val'][last] / f['val'][last]:.4f} (goal: within 2%). Wall time fp32 {f['wall']}, "
      f"bf16 {b['wall']} (one after the other on a shared machine: not a speed figure).")
if b["notes"] or f["notes"]:
    print("\nNotes in the logs: " + "; ".join(f["notes"] + b["notes"]))
print("\n| step | fp32 val loss | bf16 val loss | fp32 train loss | bf16 train loss |")
print("|---:|---:|---:|---:|---:|")
marks = sorted(set(f["val"]) | {s for s in f["loss"] if s % 25 == 0 or s == 1})
fmt = lambda d, s: f"{d[s]:.4f}" if s in d else ""
for s in marks:
    print(f"| {s} | {fmt(f['val'], s)} | {fmt(b['val'], s)} | {fmt(f['loss'], s)} | {fmt(b['loss'], s)} |")
PY
