#!/usr/bin/env python3
"""Report of bench/hybrid_bench.sh: step times and per-step bytes (intra / inter group) of
np 4 runs in groups of 2 and of 4, and a model of the inter-node traffic at 8 nodes x 8 GPUs
built from the measured byte counts.

usage: hybrid_report.py --stage S GROUP:METRICS.jsonl ...
"""
import argparse
import json
import statistics


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", type=int, required=True)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()

    by_group = {}
    for spec in a.runs:
        group, path = spec.split(":", 1)
        by_group.setdefault(int(group), []).append(path)

    rows = {}
    for group, paths in sorted(by_group.items()):
        times, intra, inter, n_params, world = [], None, None, None, None
        for p in paths:
            rs = records(p)
            mem = next(r for r in rs if r.get("event") == "memory")
            n_params, world = mem["num_params"], mem["world_size"]
            steps = [r for r in rs if "step_ms" in r]
            times.append(statistics.median(r["step_ms"] for r in steps[2:]))
            last = steps[-1]["comm_bytes"]
            intra, inter = last["intra"], last["inter"]
        rows[group] = dict(times=times, intra=intra, inter=inter, n_params=n_params, world=world)

    print(f"ZeRO-{a.stage}, fp32, 4 ranks on one host. Step time: median over steps 3.. of each run, "
          "one figure per interleaved rep. Bytes: what rank 0 sent in one step, per communicator "
          "(metrics.jsonl comm_bytes.intra / .inter).")
    print()
    print("| groups of | replicas | step ms (per rep) | intra reduce_scatter | intra all_gather | "
          "inter all_reduce | total bytes/step |")
    print("|---|---|---|---|---|---|---|")
    for group, r in sorted(rows.items()):
        rs = r["intra"].get("reduce_scatter", 0)
        ag = r["intra"].get("all_gather", 0)
        ar = r["inter"].get("all_reduce", 0)
        times = ", ".join(f"{t:.0f}" for t in r["times"])
        print(f"| {group} | {r['world'] // group} | {times} | {rs:,} | {ag:,} | {ar:,} | {rs + ag + ar:,} |")
    print()
    g4, g2 = rows.get(4), rows.get(2)
    if not (g4 and g2):
        return
    t4, t2 = statistics.median(g4["times"]), statistics.median(g2["times"])
    print(f"Median step time, groups of 2 / one group of 4: {t2:.0f} / {t4:.0f} ms = {t2 / t4:.3f}.")
    psi = g4["n_params"]
    # Coefficients from the measured bytes (num_params; shard padding adds < 0.1 %):
    # flat group: bytes per parameter per step per rank, over the ring factor (N-1)/N;
    # inter-group: bytes per element of the shard all-reduce, over 2 (R-1)/R.
    flat_bytes = sum(g4["intra"].get(k, 0) for k in ("reduce_scatter", "all_gather"))
    c_flat = flat_bytes / (psi * 3 / 4)
    R = g2["world"] // 2
    c_inter = g2["inter"].get("all_reduce", 0) / (2 * (psi / 2) * (R - 1) / R)
    print(f"Measured coefficients: one flat group moves {c_flat:.2f} bytes per parameter per step per rank "
          f"(x (N-1)/N; ZeRO-{a.stage} with 2 micro-steps, fp32); the inter-group all-reduce moves "
          f"{c_inter:.2f} bytes per shard element (x 2 (R-1)/R).")
    print()
    print("## Inter-node traffic at 8 nodes x 8 GPUs (model)")
    print()
    print("Per node and optimizer step, bytes that leave the node, with ring collectives (NCCL's "
          "choice for large messages), ranks numbered node by node:")
    print("- one flat group of 64: each group collective is a ring through all 64 ranks; 8 of its "
          "links cross nodes and each link carries one rank's volume, so a node sends "
          "c_flat x Psi x 63/64;")
    print("- groups of 8 (one node each, the default): reduce-scatters and gathers stay on the "
          "node (NVLink); each of the node's 8 ranks all-reduces its Psi/8 shard with its 7 peers "
          "on the other nodes, all of it over the network: 8 x c_inter x 2 (Psi/8) x 7/8.")
    print("Times assume 400 GB/s per node (8 x 400 Gb/s NICs, as on a DGX H100) and no overlap.")
    print()
    print("| model | parameters | flat group of 64: GB/node/step | groups of 8: GB/node/step | "
          "saved | flat ms at 400 GB/s | groups ms |")
    print("|---|---|---|---|---|---|---|")
    for name, p in (("GPT-2 124M", 124_439_808), ("GPT-2 1.5B", 1_557_611_200)):
        flat = c_flat * p * 63 / 64
        hyb = 8 * c_inter * 2 * (p / 8) * 7 / 8
        print(f"| {name} | {p:,} | {flat / 1e9:.2f} | {hyb / 1e9:.2f} | {flat / hyb:.1f}x | "
              f"{flat / 400e9 * 1e3:.1f} | {hyb / 400e9 * 1e3:.1f} |")
    print()
    print("The flat group's volume grows with the micro-steps (ZeRO-3 gathers and reduce-scatters "
          "every micro-step); the groups' inter-node volume is one all-reduce per optimizer step, "
          "whatever the accumulation. In bf16 (16-bit wire) both halve.")


if __name__ == "__main__":
    main()
