#!/usr/bin/env python3
"""Compare the training records of two ztrain metrics.jsonl files exactly (bench/ab_behaviour.sh).

    python3 bench/ab_compare.py OLD.jsonl NEW.jsonl [--after-step K] [--labels OLD,NEW]

Compared: every step record (`loss`, `grad_norm`, `lr`, `loss_scale`, `skipped`, `tokens`, and
on example shards `targets` and `rows`) and every evaluation record (`val_loss`), matched by
step. Numbers are compared as the text ztrain printed, not within a tolerance: "identical"
means the same digits. Everything else (timings, tokens_per_s, step_ms, comm_bytes, *_ms, ops_ms,
the memory event) legitimately differs run to run or is not training behaviour, and is ignored.
--after-step K keeps only records of steps > K (a resumed run against the tail of a run
straight through).

The first output line is `PASS|FAIL STEPS MAXREL` (STEPS: step records compared; MAXREL: the
largest relative difference of any compared number); on FAIL the lines after it name the first
difference: step, field, both values and their relative difference. Exit status 0 on PASS, 1
on FAIL, 2 on unreadable input.
"""
import argparse
import json
import sys

STEP_FIELDS = ("loss", "grad_norm", "lr", "loss_scale", "skipped", "tokens", "targets", "rows")
EVAL_FIELDS = ("val_loss",)


def load(path, after):
    """{(kind, step): record} with numbers kept as their JSON text."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            # parse_float/int/constant keep the printed digits: 0.1 and 0.10000000000000001 differ.
            rec = json.loads(line, parse_float=str, parse_int=str, parse_constant=str)
            if "event" in rec or "step" not in rec:
                continue
            kind = "eval" if "val_loss" in rec else "step" if "loss" in rec else None
            if kind is None:
                continue
            step = int(rec["step"])
            if step <= after:
                continue
            if (kind, step) in out:
                raise ValueError(f"{path}:{n}: a second {kind} record for step {step}")
            out[(kind, step)] = rec
    return out


def rel_diff(a, b):
    """Relative difference of two printed values; None when they are not both numbers."""
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return None
    if x == y:
        return 0.0
    scale = max(abs(x), abs(y))
    return abs(x - y) / scale if scale > 0 else float("inf")


MISSING = object()


def show(v):
    return "missing" if v is MISSING else json.dumps(v) if v is None or isinstance(v, bool) else str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--after-step", type=int, default=0)
    ap.add_argument("--labels", default="old,new", help="names of the two sides in the messages")
    a = ap.parse_args()
    lo, ln = a.labels.split(",", 1)
    try:
        old, new = load(a.old, a.after_step), load(a.new, a.after_step)
    except (OSError, ValueError) as e:
        print(f"FAIL 0 -\nerror: {e}")
        return 2

    diffs = []  # (step, kind, field, old, new, rel)
    max_rel = 0.0
    for key in sorted(set(old) | set(new), key=lambda k: (k[1], k[0])):
        kind, step = key
        ro, rn = old.get(key), new.get(key)
        if ro is None or rn is None:
            diffs.append((step, kind, "(record)", "present" if ro else MISSING, "present" if rn else MISSING, None))
            continue
        for field in STEP_FIELDS if kind == "step" else EVAL_FIELDS:
            vo, vn = ro.get(field, MISSING), rn.get(field, MISSING)
            r = rel_diff(vo, vn)
            if r is not None:
                max_rel = max(max_rel, r)
            if vo is not vn and vo != vn:
                diffs.append((step, kind, field, vo, vn, r))

    steps = sum(1 for k in set(old) & set(new) if k[0] == "step")
    if steps == 0:
        diffs.insert(0, (0, "step", "(records)", MISSING, MISSING, None))
    verdict = "FAIL" if diffs else "PASS"
    print(f"{verdict} {steps} {max_rel:.3g}")
    if diffs:
        step, kind, field, vo, vn, r = diffs[0]
        if field == "(records)":
            print(f"  no step records to compare ({a.old}, {a.new})")
        else:
            rel = "n/a" if r is None else f"{r:.3g}"
            print(f"  first difference: step {step} ({kind} record), {field}: {lo} {show(vo)} vs {ln} {show(vn)}"
                  f" (relative difference {rel})")
            fields = sorted({d[2] for d in diffs})
            print(f"  {len(diffs)} differing value(s) in all, from step {step} to step {diffs[-1][0]};"
                  f" fields: {', '.join(fields)}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
