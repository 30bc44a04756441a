#!/usr/bin/env python3
"""Report of bench/tensor_bench.sh: step times, tokens/s and per-step bytes by kind of runs at
several (np, T = parallel.tensor), an exact check of the tensor group's all-reduce bytes against
the Megatron formula, and a model of 8 NVLink GPUs (H100 SXM) for GPT-2 124M and a 7B-wide model.

usage: tensor_report.py [--stage S] NP:T:RUN_DIR ...   (T with an s suffix: parallel.sequence)
"""
import argparse
import configparser
import json
import os
import statistics

# The model of section 2 (see the assumptions printed with it).
NVLINK_BUSBW = 370e9          # bytes/s per GPU, NCCL ring all-reduce busBw on 8 x H100 SXM
PEAK_BF16 = 989e12            # H100 SXM dense bf16 FLOP/s
ACHIEVED = 0.40               # assumed fraction of it reached by the step
GPUS = 8
MODELS = (  # name, layers, width, seq, micro_batch, padded vocabulary
    ("GPT-2 124M", 12, 768, 1024, 8, 50304),
    ("7B-wide", 32, 4096, 4096, 1, 50304),
)


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def config(run_dir):
    cp = configparser.ConfigParser()
    with open(os.path.join(run_dir, "config.ini")) as f:
        cp.read_string("[top]\n" + f.read())
    return cp


def ring_bytes(n, t, size):
    """What one rank sends in a ring all-reduce of n elements over t ranks (ztrain's count)."""
    return 2 * (n * size * (t - 1) // t)


def tensor_bytes_per_micro(t, layers, tokens, width, act_size=4, ce_size=4):
    """Tensor-group all-reduce bytes per rank and micro-step: 4 per layer + 2 of tokens x width
    activations, 3 of tokens fp32 floats (the vocab-parallel cross-entropy)."""
    return (4 * layers + 2) * ring_bytes(tokens * width, t, act_size) + 3 * ring_bytes(tokens, t, ce_size)


def sequence_bytes_per_micro(t, layers, tokens, width, act_size=4, f32=4):
    """Sequence parallelism (GPT-2) per rank and micro-step, by kind: all-gathers (6 per layer: the
    2 norm outputs forward, d residual twice and the 2 norm outputs again in backward; the final norm
    forward, the embedding's gradient backward), reduce-scatters (4 per layer; the embedding forward,
    the LM head's input gradient backward) of tokens x width, n (T-1)/T elements sent each; all-reduces
    of the cross-entropy's 3 floats a token and the norms' weight gradients ((4 L + 2) width fp32)."""
    one = tokens * width * act_size * (t - 1) // t
    return dict(all_gather=(6 * layers + 2) * one, reduce_scatter=(4 * layers + 2) * one,
                all_reduce=ring_bytes(3 * tokens, t, f32) + ring_bytes((4 * layers + 2) * width, t, f32))


def gpt2_params(layers, width, seq, vocab):
    """ztrain's GPT-2 count (tied embedding, padded vocabulary, learned positions, biases)."""
    return layers * (12 * width * width + 13 * width) + vocab * width + seq * width + 2 * width


def fmt_bytes(b):
    return f"{b / 1e9:.2f} GB" if b >= 1e9 else f"{b / 1e6:.1f} MB"


def load(spec):
    np_, t, run_dir = spec.split(":", 2)
    sp = t.endswith("s")
    t = t.rstrip("s")
    rs = records(os.path.join(run_dir, "metrics.jsonl"))
    cp = config(run_dir)
    steps = [r for r in rs if "step_ms" in r]
    mem = next(r for r in rs if r.get("event") == "memory")
    peak = next((r for r in rs if r.get("event") == "memory_peak"), None)
    return dict(np=int(np_), t=int(t), sp=sp, steps=steps, mem=mem, peak=peak,
                layers=cp.getint("model", "n_layer"), width=cp.getint("model", "n_embd"),
                seq=cp.getint("model", "seq_len"), micro=cp.getint("train", "micro_batch"),
                accum=cp.getint("train", "grad_accum"), vocab=cp.getint("model", "vocab_size"),
                pad=cp.getint("model", "vocab_pad_to"))


def summarize(runs):
    first = runs[0]
    times = [statistics.median(r["step_ms"] for r in run["steps"][2:]) for run in runs]
    tok = [run["steps"][1]["tokens"] - run["steps"][0]["tokens"] for run in runs]
    assert len(set(tok)) == 1, tok
    # Bytes: every step of every rep must agree (rank 0's counts); the check below uses them.
    seen = {json.dumps(s["comm_bytes"], sort_keys=True) for run in runs for s in run["steps"]}
    cb = first["steps"][-1]["comm_bytes"]
    peak = max(max(run["peak"]["measured_peak"]) for run in runs if run["peak"])
    predicted = max(run["peak"]["predicted_peak"] for run in runs if run["peak"])
    phases = {k: statistics.median(statistics.median(s[k] for s in run["steps"][2:]) for run in runs)
              for k in ("fwd_ms", "bwd_ms", "comm_ms", "opt_ms")}
    return dict(times=times, med=statistics.median(times), tokens=tok[0], cb=cb, same=len(seen) == 1,
                peak=peak, predicted=predicted, phases=phases,
                **{k: first[k] for k in ("np", "t", "sp", "layers", "width", "seq", "micro", "accum", "mem", "vocab", "pad")})


def peak_note(rows):
    """The measured peaks against the plan, with one data rank and with several: the tensor group's
    collectives have no plan item of their own, ZeRO's reduce-scatter temporaries none either
    (docs/memory-plan.md)."""
    def worst(sel):
        return max((r["peak"] / r["predicted"] - 1 for r in rows if sel(r)), key=abs, default=None)
    one, many = worst(lambda r: r["np"] == r["t"]), worst(lambda r: r["np"] > r["t"])
    out = []
    if one is not None:
        out.append(f"With one data rank (D = 1) the largest measured peak is {one:+.1%} off the plan: the "
                   "tensor group's collectives have no item of their own, and their transient copies fit in it.")
    if many is not None:
        out.append(f"With several data ranks it is {many:+.1%} off: Open MPI's reduce-scatter temporaries for "
                   "ZeRO's gradients (on some ranks only; bench/mpi_temporaries.sh), which the plan does not "
                   "count yet, T = 1 included.")
    return " ".join(out)


def label(r):
    return f"{r['t']} SP" if r["sp"] else str(r["t"])


def measured_table(rows, stage):
    print(f"ZeRO-{stage} over the world / T data-parallel ranks, fp32, micro_batch {rows[0]['micro']}, "
          f"grad_accum {rows[0]['accum']}, 1 thread per rank, all ranks on one host. micro_batch is the "
          "same in every run, so the global batch (micro_batch x grad_accum x world / T sequences) shrinks "
          "as T grows: compare tokens/s, not step times, across T. Step ms: median over steps 3.. of each "
          "run, one figure per interleaved rep; tok/s = tokens per step / the median of those. Bytes: what "
          "rank 0 sent in one step (metrics.jsonl comm_bytes; identical in every step of every rep: "
          f"{'yes' if all(r['same'] for r in rows) else 'NO'}). Activations: the memory record's (rank 0, "
          "allocated exactly as planned). Peak RSS: the largest rank's measured peak over the reps, and in "
          "brackets the memory plan's prediction for a rank. " + peak_note(rows))
    print()
    print("| np | T | data ranks | tokens/step | step ms (per rep) | tok/s | tensor all_reduce | "
          "tensor all_gather | tensor reduce_scatter | intra reduce_scatter | intra all_gather | inter | "
          "scalar (all groups) | activations MiB | peak RSS MiB (plan) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cb = r["cb"]
        tb = cb.get("tensor", {})
        inter = sum(cb.get("inter", {}).values())
        times = ", ".join(f"{x:.0f}" for x in r["times"])
        print(f"| {r['np']} | {label(r)} | {r['np'] // r['t']} | {r['tokens']:,} | {times} | "
              f"{r['tokens'] / (r['med'] / 1e3):,.0f} | {tb.get('all_reduce', 0):,} | "
              f"{tb.get('all_gather', 0):,} | {tb.get('reduce_scatter', 0):,} | "
              f"{cb['intra'].get('reduce_scatter', 0):,} | {cb['intra'].get('all_gather', 0):,} | {inter:,} | "
              f"{cb.get('scalar', 0):,} | {r['mem']['activations'] / 2**20:.1f} | {r['peak'] / 2**20:.0f} "
              f"({r['predicted'] / 2**20:.0f}) |")
    print()
    for np_ in sorted({r["np"] for r in rows}):
        base = next((r for r in rows if r["np"] == np_ and r["t"] == 1 and not r["sp"]), None)
        if not base:
            continue
        rel = "; ".join(
            f"T={label(r)} {r['tokens'] / r['med'] / (base['tokens'] / base['med']):.2f}x (per rep: "
            + ", ".join(f"{r['tokens'] / a / (base['tokens'] / b):.2f}" for a, b in zip(r["times"], base["times"]))
            + ")" for r in rows if r["np"] == np_ and r["t"] > 1)
        print(f"- np {np_}: tokens/s against T=1 of the same np, medians: {rel}.")
    print()
    print("Rank 0's phases (metrics.jsonl *_ms; median over steps 3.., then over reps): the tensor "
          "all-reduces run inside forward and backward, ZeRO's reduce-scatter / all-gather in comm.")
    print()
    print("| np | T | fwd ms | bwd ms | comm ms | opt ms | fwd+bwd ms per 1k tokens |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ph = r["phases"]
        per_k = (ph["fwd_ms"] + ph["bwd_ms"]) / r["tokens"] * 1e3
        print(f"| {r['np']} | {label(r)} | {ph['fwd_ms']:.0f} | {ph['bwd_ms']:.0f} | {ph['comm_ms']:.0f} | "
              f"{ph['opt_ms']:.0f} | {per_k:.0f} |")
    print()


def check_table(rows):
    print("## Tensor bytes against the formula")
    print()
    print("Per micro-step the tensor group all-reduces B*S*C elements 4 times per layer (2 forward after "
          "the row-parallel products, 2 backward) and 2 more (embedding output, LM head input gradient), "
          "plus 3*B*S fp32 floats for the vocab-parallel cross-entropy; a ring all-reduce of n elements "
          "over T ranks counts 2*n*(T-1)/T elements sent per rank, 4 bytes each in fp32; times grad_accum "
          "micro-steps. The per-layer coefficient is solved from the measured bytes: "
          "(elements - 3BS - 2BSC) / (L BSC).")
    print()
    print("| np | T | B*S*C | measured B/step | formula B/step | all-reduces per layer | tensor scalar | check |")
    print("|---|---|---|---|---|---|---|---|")
    verdicts = []
    for r in rows:
        tokens = r["micro"] * r["seq"]
        got = r["cb"].get("tensor", {}).get("all_reduce", 0)
        if r["t"] == 1:
            ok = "tensor" not in r["cb"]
            print(f"| {r['np']} | 1 | {tokens * r['width']:,} | - | - | - | - | "
                  f"{'OK (no tensor group)' if ok else 'DIFF (tensor object at T=1)'} |")
            verdicts.append(ok)
            continue
        if r["sp"]:
            want = {k: r["accum"] * v for k, v in
                    sequence_bytes_per_micro(r["t"], r["layers"], tokens, r["width"]).items()}
            got = {k: r["cb"]["tensor"].get(k, 0) for k in want}
            ok = got == want and r["same"]
            verdicts.append(ok)
            print(f"| {r['np']} | {label(r)} | {tokens * r['width']:,} | {sum(got.values()):,} | "
                  f"{sum(want.values()):,} | (gather {got['all_gather']:,}, scatter {got['reduce_scatter']:,}, "
                  f"all-reduce {got['all_reduce']:,}) | {r['cb']['tensor'].get('scalar', 0)} | "
                  f"{'OK' if ok else 'DIFF ' + json.dumps({k: got[k] - want[k] for k in want})} |")
            continue
        want = r["accum"] * tensor_bytes_per_micro(r["t"], r["layers"], tokens, r["width"])
        elems = got / (r["accum"] * 2 * 4 * (r["t"] - 1) / r["t"])
        coef = (elems - 3 * tokens - 2 * tokens * r["width"]) / (r["layers"] * tokens * r["width"])
        ok = got == want and r["same"]
        verdicts.append(ok)
        print(f"| {r['np']} | {r['t']} | {tokens * r['width']:,} | {got:,} | {want:,} | {coef:.3f} | "
              f"{r['cb']['tensor'].get('scalar', 0)} | {'OK' if ok else f'DIFF ({got - want:+,})'} |")
    print()
    print("With sequence parallelism (T SP) the formula is sequence_bytes_per_micro: (6L+2) all-gathers and "
          "(4L+2) reduce-scatters of B*S*C elements (n (T-1)/T sent each), and all-reduces of the 3*B*S "
          "cross-entropy floats and of the norms' weight gradients ((4L+2) C floats); the per-layer column "
          "gives the three kinds.")
    print()
    print(f"Byte check: {'OK' if all(verdicts) else 'DIFF'} ({sum(verdicts)}/{len(verdicts)} settings exact).")
    zero = []
    for r in rows:
        d = r["np"] // r["t"]
        local = r["mem"]["params"] // 4  # fp32: the parameters this rank's tensor slice holds
        want = 4 * local * (d - 1) // d
        got = (r["cb"]["intra"].get("reduce_scatter", 0), r["cb"]["intra"].get("all_gather", 0))
        zero.append(f"np {r['np']} T={r['t']}: {local:,} local parameters, D={d}, "
                    f"{'OK' if got == (want, want) else f'DIFF {got} vs {want}'}")
    print("ZeRO-1 intra bytes against one reduce-scatter and one all-gather of the rank's P_local fp32 "
          "parameters per step over its D data ranks (4 P_local (D-1)/D each): " + "; ".join(zero) + ".")
    sp = [(r, next((q for q in rows if q["np"] == r["np"] and q["t"] == r["t"] and not q["sp"]), None))
          for r in rows if r["sp"]]
    print("Activations per rank, sequence parallelism against the same T without it (the memory record's "
          "activations, allocated and checked against the plan): " + "; ".join(
              f"np {r['np']} T={r['t']}: {q['mem']['activations'] / 2**20:.1f} -> "
              f"{r['mem']['activations'] / 2**20:.1f} MiB ({r['mem']['activations'] / q['mem']['activations']:.2f}x)"
              for r, q in sp if q) + ".")
    r0 = rows[0]
    p = gpt2_params(r0["layers"], r0["width"], r0["seq"], -(-r0["vocab"] // r0["pad"]) * r0["pad"])
    print(f"The parameter formula of the model below gives {p:,} for this model; ztrain reports "
          f"{r0['mem']['num_params']:,} ({'equal' if p == r0['mem']['num_params'] else 'DIFFERENT'}).")
    print()


def model_table():
    eff = PEAK_BF16 * ACHIEVED
    print(f"## Model: one node of {GPUS} x H100 SXM (NVLink 4 through NVSwitch), bf16")
    print()
    print("Assumptions:")
    print(f"- tensor all-reduces run at an NCCL ring busBw of {NVLINK_BUSBW / 1e9:.0f} GB/s per GPU, whatever "
          "T: NVLink 4 is 450 GB/s per direction per GPU, and NCCL's developers quote ~370 GB/s effective "
          "(busBw with NCCL_ALGO=Ring or non-all-reduce collectives) after protocol overhead "
          "(NVIDIA/nccl-tests issue 212; NVLink SHARP reaches ~480 GB/s busBw on 8 GPUs only for large "
          "messages); the NVSwitch gives every group of T its full per-GPU bandwidth. Time = bytes sent "
          "per GPU / busBw; the per-call latency (4L+5 calls per micro-step, ~10-30 us each) is left out, "
          "and so is any overlap with compute (the all-reduces sit between the products that need them);")
    print(f"- compute: dense bf16 {PEAK_BF16 / 1e12:.0f} TFLOP/s at an achieved {ACHIEVED:.0%} = "
          f"{eff / 1e12:.0f} TFLOP/s; FLOPs per micro-step per GPU = (6 P tokens + 12 L S C tokens) / T "
          "(the 6P rule over all parameters, the tied LM head included, plus the attention scores and "
          "their products, forward and backward, without causal halving);")
    print("- TP bytes: the formula the measured runs matched exactly, in bf16: the (4L+2) B S C activation "
          "all-reduces in the activation dtype (2 bytes, as ztrain's TensorGroup::all_reduce), the 3 B S "
          "cross-entropy floats in fp32;")
    print(f"- data parallelism over the other {GPUS}/T GPUs of the node: one ring all-reduce (or ZeRO "
          "reduce-scatter + all-gather, the same volume) of the P/T local gradients per optimizer step, "
          "bf16 on the wire: 2 x 2 (P/T) (D-1)/D bytes per GPU, D = 8/T; it runs once per step whatever "
          "grad_accum, and can hide behind the backward pass; the TP bytes come every micro-step;")
    print("- model state: 16 bytes per parameter (bf16 weights and gradients, fp32 master, AdamW m and v) "
          "over T, before any ZeRO sharding over the data-parallel ranks; GPT-2 architecture (4C MLP, tied "
          "vocabulary of 50304, learned positions) for both models.")
    print()
    print("| model | P | tokens/micro | T | D | TP bytes/micro/GPU | TP ms | compute ms/micro | TP/compute | "
          "DP grad bytes/step/GPU | DP ms | state GB/GPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    out = {}
    for name, layers, width, seq, micro, vocab in MODELS:
        p = gpt2_params(layers, width, seq, vocab)
        tokens = micro * seq
        for t in (1, 2, 4, 8):
            d = GPUS // t
            tp = tensor_bytes_per_micro(t, layers, tokens, width, act_size=2, ce_size=4)
            tp_ms = tp / NVLINK_BUSBW * 1e3
            comp_ms = (6 * p * tokens + 12 * layers * seq * width * tokens) / t / eff * 1e3
            dp = 2 * 2 * (p / t) * (d - 1) / d
            dp_ms = dp / NVLINK_BUSBW * 1e3
            out[(name, t)] = dict(tp=tp, tp_ms=tp_ms, comp_ms=comp_ms, dp=dp, p=p)
            print(f"| {name} | {p / 1e6:,.1f}M | {tokens:,} | {t} | {d} | {fmt_bytes(tp) if tp else '0'} | "
                  f"{tp_ms:.2f} | {comp_ms:.1f} | {tp_ms / comp_ms:.0%} | {fmt_bytes(dp) if dp else '0'} | "
                  f"{dp_ms:.2f} | {16 * p / t / 1e9:.1f} |")
    print()
    return out


def conclusions(m):
    g2, g8, gdp = m[("GPT-2 124M", 2)], m[("GPT-2 124M", 8)], m[("GPT-2 124M", 1)]
    w2, w8, w1 = m[("7B-wide", 2)], m[("7B-wide", 8)], m[("7B-wide", 1)]
    print("## When tensor parallelism pays")
    print()
    print(f"GPT-2 124M: tensor parallelism does not pay. At T=2 every micro-step moves {fmt_bytes(g2['tp'])} "
          f"per GPU, more than the whole 8-way data-parallel gradient all-reduce of the unsplit model "
          f"({fmt_bytes(gdp['dp'])}, once per optimizer step and free to overlap the backward pass); that "
          f"traffic sits between the products, at {g2['tp_ms'] / g2['comp_ms']:.0%} (T=2) to "
          f"{g8['tp_ms'] / g8['comp_ms']:.0%} (T=8) of the compute it splits, and the model's "
          f"{16 * gdp['p'] / 1e9:.1f} GB of state fits one GPU many times over, so data parallelism is the "
          "choice. TP bytes per FLOP go as about 16 (T-1) / (72 C + 12 S) (bf16, embedding aside), so wide "
          f"layers and long sequences shrink them: the 7B-wide model (C = S = 4096) spends "
          f"{w2['tp_ms'] / w2['comp_ms']:.0%} of its compute time at T=2, "
          f"{m[('7B-wide', 4)]['tp_ms'] / m[('7B-wide', 4)]['comp_ms']:.0%} at T=4 and "
          f"{w8['tp_ms'] / w8['comp_ms']:.0%} at T=8. "
          f"There TP buys what data parallelism cannot: it splits the {16 * w1['p'] / 1e9:.0f} GB of model "
          "state (ZeRO could shard that too) and also the weights and activations of one micro-batch of one "
          "4096-token sequence, which no data-parallel scheme divides, so it pays when the state or one "
          "micro-batch's activations do not fit one GPU, or when the global batch is too small to give "
          "every GPU a micro-batch of its own. "
          "Across nodes (a 400 Gb/s NIC, 50 GB/s per GPU, instead of ~370 GB/s) the same bytes cost ~7x "
          "more, which is why T stays within a node.")

HEADS = {"GPT-2 124M": 12, "7B-wide": 32}


def sequence_section(m):
    """Sequence parallelism on the modelled node: activation bytes per GPU with and without it
    (ztrain's count, docs/memory-plan.md: sbh(8 + 24/T) + 2as^2b/T a layer without, (32 sbh +
    2as^2b)/T with, bf16) against its extra traffic (the 2 re-gathers of the norms' outputs per
    layer in backward; the other gathers and scatters carry the all-reduces' bytes)."""
    print()
    print()
    print("## When sequence parallelism pays")
    print()
    print("Per GPU and micro-step, bf16, the model's layers (attention probabilities kept, no recompute): "
          "activations without and with `parallel.sequence`, and the extra bytes it sends (2 all-gathers of "
          "B S C (T-1)/T a layer) at the busBw above.")
    print()
    print("| model | T | activations | with SP | saved | extra SP bytes/micro | extra ms | of compute |")
    print("|---|---|---|---|---|---|---|---|")
    for name, layers, width, seq, micro, _vocab in MODELS:
        sbh = seq * micro * width
        att = 2 * HEADS[name] * seq * seq * micro
        for t in (2, 4, 8):
            without = layers * (sbh * (8 + 24 / t) + att / t)
            with_sp = layers * (32 * sbh + att) / t
            extra = layers * 2 * 2 * sbh * (t - 1) / t
            ms = extra / NVLINK_BUSBW * 1e3
            print(f"| {name} | {t} | {fmt_bytes(without)} | {fmt_bytes(with_sp)} | {fmt_bytes(without - with_sp)} | "
                  f"{fmt_bytes(extra)} | {ms:.2f} | {ms / m[(name, t)]['comp_ms']:.0%} |")
    print()
    print("It pays where tensor parallelism does and activations are what does not fit: a long sequence "
          "through wide layers, where the 8 sbh bytes a layer every rank keeps whole without it become the "
          "largest item as T grows. On the CPU runs above (S = 256, logits of a 50k vocabulary per rank) "
          "the residual stream is a small part of the activations, so it saves 5-15% there; the bytes it "
          "adds are measured exactly in the table above.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", type=int, default=1)
    ap.add_argument("runs", nargs="+", help="NP:T:RUN_DIR")
    a = ap.parse_args()
    by = {}
    for spec in a.runs:
        run = load(spec)
        by.setdefault((run["np"], run["t"], run["sp"]), []).append(run)
    rows = [summarize(by[k]) for k in sorted(by)]
    measured_table(rows, a.stage)
    check_table(rows)
    m = model_table()
    conclusions(m)
    sequence_section(m)


if __name__ == "__main__":
    main()
