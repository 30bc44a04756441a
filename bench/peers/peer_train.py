"""The peers' training loop: GPT2LMHeadModel from the shared Hugging Face directory, AdamW
(decay on every weight but the biases and LayerNorms, as transformers' Trainer groups them
and as ztrain decays), ztrain's learning-rate schedule, global grad-norm clipping, fed
ztrain's own token windows (peers_common.ZtrainWindows).

Modes:
  accelerate  shaped like a Hugging Face fine-tuning script: Accelerator(cpu=True),
              accelerator.prepare(model, optimizer), accelerator.backward(loss),
              accelerator.clip_grad_norm_; launch with
              `accelerate launch --cpu --num_processes N peer_train.py --mode accelerate ...`
              (DDP over gloo). bf16 = Accelerator(mixed_precision="bf16"): CPU autocast.
  fsdp2       torch.distributed.fsdp.fully_shard on every block and the root (ZeRO-3-like),
              gloo; launch with `python -m torch.distributed.run --nproc_per_node N ...`.
              bf16 = MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32).
  single      one process: eager, or --compile (torch.compile, inductor); bf16 =
              torch.autocast("cpu", dtype=torch.bfloat16).

The scheduler is a LambdaLR on ztrain's formula and is NOT passed to accelerator.prepare:
a prepared scheduler steps num_processes times per optimizer step (accelerate scales it for
a dataloader it shards), which is not the schedule the run asked for.

Examples (pair 2): with --examples FILE (JSON Lines of {"text": ...}) the batches are whole
examples instead of ztrain's windows, tokenized once before the timed steps as the seed's
script does (`tokenizer(text, truncation=True, max_length=seq_len)` with the end-of-text
token as padding), in a --seed shuffled order: --padding max_length pads every row to
seq_len (the seed's `padding="max_length"`), --padding longest to the micro-batch's longest
example (DataCollatorWithPadding). Padding positions get label -100 and attention mask 0, so
the loss is the mean over the micro-batch's targets; each step record adds `targets`, the
target tokens of every rank.

LoRA (pair 7): --lora R wraps the model with PEFT's get_peft_model (LoraConfig r = R,
lora_alpha = --lora-alpha, dropout 0, target_modules = --lora-targets), the way PEFT's
fine-tuning examples do; AdamW then holds the adapters only (requires_grad). The model is
whatever the directory holds (AutoModelForCausalLM: GPT-2 or Llama).

Rank 0 writes one JSON line per step to --metrics (step, loss averaged over the ranks, lr,
grad_norm before clipping, step_ms, tokens_per_s of all ranks) and a final
{"event": "summary"} line with every rank's peak RSS (VmHWM) and the versions.
"""
import argparse
import contextlib
import json
import os
import platform
import time

import torch
import torch.distributed as dist

from peers_common import ZtrainWindows, peak_rss_kib, val_batch, ztrain_lr_factor


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["accelerate", "fsdp2", "single"], required=True)
    ap.add_argument("--model", required=True, help="Hugging Face model directory (make_init.py)")
    ap.add_argument("--train", required=True, help="ztrain training shards (glob)")
    ap.add_argument("--val", default="", help="ztrain validation shards (glob): one val_loss at the end")
    ap.add_argument("--eval-batches", type=int, default=4, help="ztrain's train.eval_batches")
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="single: torch.compile the model")
    ap.add_argument("--profile", default="", help="also write torch.profiler's op table (self CPU time) to this file")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--lr-min", type=float, default=3e-5)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--schedule", choices=["cosine", "linear", "constant"], default="cosine")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1337, help="ztrain's train.seed: the data order")
    ap.add_argument("--examples", default="", help="JSON Lines of {\"text\": ...}: train on padded examples")
    ap.add_argument("--padding", choices=["max_length", "longest"], default="max_length")
    ap.add_argument("--lora", type=int, default=0, help="PEFT LoRA rank (0: full fine-tuning)")
    ap.add_argument("--lora-alpha", type=float, default=32)
    ap.add_argument("--lora-targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    return ap.parse_args()


class PaddedExamples:
    """The seed's fine-tuning batches: every example tokenized once (truncated to seq_len),
    a shuffled order, rows padded with the end-of-text token and masked out of the loss."""

    def __init__(self, path, model_dir, seq_len, padding, seed, count):
        import random
        from transformers import PreTrainedTokenizerFast
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(model_dir, "tokenizer.json"))
        with open(path) as f:
            texts = [json.loads(line)["text"] for line in f if line.strip()]
        random.Random(seed).shuffle(texts)
        # Only the examples the run takes (the seed's script maps the whole set; untimed either way).
        self.ids = [e for e in tok(texts[:count], truncation=True, max_length=seq_len)["input_ids"] if len(e) > 1]
        self.T, self.padding, self.pad = seq_len, padding, 50256

    def micro_batch(self, step, rank, a, micro_batch, grad_accum, world):
        import numpy as np
        first = step * micro_batch * grad_accum * world + (rank * grad_accum + a) * micro_batch
        rows = [self.ids[(first + j) % len(self.ids)] for j in range(micro_batch)]
        width = self.T if self.padding == "max_length" else max(len(r) for r in rows)
        x = np.full((micro_batch, width), self.pad, dtype=np.int64)
        mask = np.zeros((micro_batch, width), dtype=np.int64)
        for i, r in enumerate(rows):
            x[i, :len(r)] = r
            mask[i, :len(r)] = 1
        labels = np.where(mask == 1, x, -100)
        return x, labels, mask, int(sum(len(r) - 1 for r in rows))


def param_groups(model, weight_decay):
    """transformers' Trainer grouping: no decay for biases and LayerNorm weights."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:  # LoRA's frozen base
            continue
        (no_decay if name.endswith(".bias") or ".ln_" in name or name.startswith("ln_")
         or "ln_f" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Runner:
    """The mode's process group, model wrapping, backward, clipping and autocast."""

    def __init__(self, a):
        self.a = a
        self.accelerator = None
        if a.mode == "accelerate":
            from accelerate import Accelerator
            self.accelerator = Accelerator(cpu=True, mixed_precision="bf16" if a.dtype == "bf16" else "no")
            self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
        elif a.mode == "fsdp2":
            dist.init_process_group("gloo")
            self.rank, self.world = dist.get_rank(), dist.get_world_size()
        else:
            self.rank, self.world = 0, 1
        torch.set_num_threads(a.threads)

    def wrap(self, model):
        a = self.a
        if a.mode == "fsdp2":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            mesh = init_device_mesh("cpu", (self.world,))
            mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                  if a.dtype == "bf16" else MixedPrecisionPolicy())
            for block in model.transformer.h:
                fully_shard(block, mesh=mesh, mp_policy=mp)
            fully_shard(model, mesh=mesh, mp_policy=mp)
        elif a.mode == "single" and a.compile:
            model = torch.compile(model)
        return model

    def prepare(self, model, opt):
        if self.accelerator:
            return self.accelerator.prepare(model, opt)
        return model, opt

    def autocast(self):
        if self.a.mode == "single" and self.a.dtype == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def backward(self, loss):
        if self.accelerator:
            self.accelerator.backward(loss)
        else:
            loss.backward()

    def clip(self, model):
        if self.accelerator:
            return float(self.accelerator.clip_grad_norm_(model.parameters(), self.a.clip))
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.a.clip)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def mean_over_ranks(self, x):
        if self.world == 1:
            return x
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t[0]) / self.world

    def gather_rss(self):
        rss = torch.tensor([peak_rss_kib()], dtype=torch.int64)
        if self.world == 1:
            return [int(rss[0])]
        out = [torch.zeros_like(rss) for _ in range(self.world)]
        dist.all_gather(out, rss)
        return [int(r[0]) for r in out]


def forward_loss(a, model, data, step, run, m):
    """The micro-batch's loss (divided by grad_accum) and its target tokens."""
    if isinstance(data, PaddedExamples):
        x, labels, mask, targets = data.micro_batch(step, run.rank, m, a.micro_batch, a.grad_accum, run.world)
        x, labels, mask = torch.from_numpy(x), torch.from_numpy(labels), torch.from_numpy(mask)
        with run.autocast():
            loss = model(input_ids=x, attention_mask=mask, labels=labels).loss / a.grad_accum
        return loss, targets
    x, y = data.micro_batch(step, run.rank, m, a.micro_batch, a.grad_accum, run.world)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    with run.autocast():
        # labels only switch the loss on; shift_labels are ztrain's targets, so every
        # one of the T positions is a target, as in ztrain (no token lost to the shift).
        loss = model(input_ids=x, labels=x, shift_labels=y).loss / a.grad_accum
    return loss, a.micro_batch * data.T


def train(a, run, model, opt, sched, data, out):
    for step in range(a.steps):
        t0 = time.perf_counter()
        loss_sum, targets = 0.0, 0
        for m in range(a.grad_accum):
            loss, n = forward_loss(a, model, data, step, run, m)
            run.backward(loss)
            loss_sum += float(loss.detach())
            targets += n
        grad_norm = run.clip(model)
        lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        step_s = time.perf_counter() - t0
        loss_mean = run.mean_over_ranks(loss_sum)
        targets = round(run.mean_over_ranks(targets) * run.world)
        if run.rank == 0:
            out.write(json.dumps({"step": step + 1, "loss": loss_mean, "lr": lr, "grad_norm": grad_norm,
                                  "step_ms": step_s * 1e3, "tokens": targets, "targets": targets,
                                  "tokens_per_s": targets / step_s}) + "\n")
            out.flush()


def validate(a, run, model, T, out):
    """ztrain's evaluation: eval_batches micro-batches per rank from the val shards' leading
    windows, the mean loss over every rank's."""
    data = ZtrainWindows(a.val, T, a.seed, shuffle=False)
    model.eval()
    total = 0.0
    with torch.no_grad():
        for e in range(a.eval_batches):
            x, y = val_batch(data, run.rank, e, a.micro_batch, a.eval_batches)
            x, y = torch.from_numpy(x), torch.from_numpy(y)
            with run.autocast():
                total += float(model(input_ids=x, labels=x, shift_labels=y).loss)
    val = run.mean_over_ranks(total / a.eval_batches)
    if run.rank == 0:
        out.write(json.dumps({"step": a.steps, "val_loss": val}) + "\n")


def main():
    a = parse()
    run = Runner(a)
    from transformers import AutoModelForCausalLM
    import transformers
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    if a.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=a.lora, lora_alpha=a.lora_alpha, lora_dropout=0.0,
                                                 target_modules=a.lora_targets.split(","), task_type="CAUSAL_LM"))
    model.train()
    model = run.wrap(model)
    opt = torch.optim.AdamW(param_groups(model, a.weight_decay), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    model, opt = run.prepare(model, opt)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: ztrain_lr_factor(s, a.warmup, a.steps, a.schedule, a.lr, a.lr_min))
    config = model.config if hasattr(model, "config") else model.module.config
    n_positions = getattr(config, "n_positions", None) or config.max_position_embeddings
    global_batch = a.micro_batch * a.grad_accum * run.world
    data = (PaddedExamples(a.examples, a.model, n_positions, a.padding, a.seed, a.steps * global_batch) if a.examples
            else ZtrainWindows(a.train, n_positions, a.seed))
    out = open(a.metrics, "w") if run.rank == 0 else None
    t0 = time.perf_counter()
    if a.profile:
        # The ops' share of the steps, to set beside ztrain's ZT_PROFILE_OPS=1 ops_ms.
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            train(a, run, model, opt, sched, data, out)
        if run.rank == 0:  # one rank's table: the ranks run the same ops
            with open(a.profile, "w") as f:
                f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30) + "\n")
    else:
        train(a, run, model, opt, sched, data, out)
    total_s = time.perf_counter() - t0
    if a.val:
        validate(a, run, model, data.T, out)
    rss = run.gather_rss()
    if run.rank == 0:
        versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                    "python": platform.python_version()}
        if run.accelerator:
            import accelerate
            versions["accelerate"] = accelerate.__version__
        if a.lora:
            import peft
            versions["peft"] = peft.__version__
        out.write(json.dumps({"event": "summary", "mode": a.mode, "dtype": a.dtype, "compile": a.compile,
                              "world": run.world, "threads": a.threads, "total_s": total_s,
                              "rss_kib": rss, "versions": versions}) + "\n")
        out.close()
    if a.mode == "fsdp2":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
