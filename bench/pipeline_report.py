"""Tables for bench/pipeline_bench.sh from pipeline_step_bench's JSON lines (medians over rounds)."""
import json
import statistics
import sys
from collections import defaultdict

runs = defaultdict(list)
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        runs[(r["schedule"], r["P"], r["m"])].append(r)


def med(key, rs):
    return statistics.median(r[key] for r in rs)


def med_list(key, rs):
    return [statistics.median(r[key][k] for r in rs) for k in range(len(rs[0][key]))]


print("| schedule | P | v | m | layers per virtual stage | step s | vs 1 rank | idle s per stage | busy s per stage "
      "| imbalance | bubble, worst stage | bubble, busiest stage | formula (zb: over 3) | MB sent | formula MB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
rows = []
for (schedule, P, m), rs in sorted(runs.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
    step = med("step_s", rs)
    one = runs.get(("1f1b", 1, m))
    speedup = med("step_s", one) / step if one else float("nan")
    idle = med_list("wait_s", rs)
    busy = med_list("busy_s", rs)
    bubble = med("bubble_measured", rs)
    formula = rs[0]["bubble_formula"]
    busiest = max(range(len(busy)), key=lambda k: busy[k])
    own = idle[busiest] / busy[busiest]
    imbalance = max(busy) / min(busy)
    rows.append((schedule, P, m, bubble, own, formula, speedup))
    print(f"| {schedule if P > 1 else 'one rank'} | {P} | {rs[0]['v']} | {m} | {rs[0]['layers']} | {step:.3f} "
          f"| {speedup:.2f}x | {', '.join(f'{x:.3f}' for x in idle)} | {', '.join(f'{x:.3f}' for x in busy)} "
          f"| {imbalance:.2f} | {bubble:.3f} | {own:.3f} | {formula:.3f} | {rs[0]['bytes'] / 2**20:.1f} "
          f"| {rs[0]['bytes_formula'] / 2**20:.1f} |")
print()
print(f"Rounds per configuration: {min(len(v) for v in runs.values())} (medians shown).")
print()
print("Measured bubble against the formula, P = 2:")
print()
for schedule, P, m, bubble, own, formula, speedup in rows:
    if P == 1:
        continue
    print(f"- {schedule}, m = {m}: {bubble:.3f} on the worst stage, {own:.3f} on the busiest, {formula:.3f} by the "
          f"formula; {speedup:.2f}x one rank's step")
