"""ztrain's learning-rate schedules against transformers' own schedulers.

    python test_lr_schedules.py BIN_DIR SOURCE_DIR

A tiny GPT-2 trains 30 steps (5 of warmup) under each schedule; the lr each step's record in
metrics.jsonl reports is compared with what transformers' LambdaLR gives the same step (step k,
1-based, against the scheduler after k - 1 steps) on an optimizer of the same peak lr:
  - wsd, decay_fraction 0.4, each decay_shape: get_wsd_schedule(num_stable_steps,
    num_decay_steps, decay_type, min_lr_ratio = lr_min / lr);
  - cosine: get_cosine_with_min_lr_schedule_with_warmup(min_lr = lr_min);
  - linear (lr_min 0): get_linear_schedule_with_warmup;
  - a wsd cooldown: 20 steps with checkpoints, resumed at step 20 with --train.max_steps=30
    --train.decay_steps=10: steps 21..30 against get_wsd_schedule(15 stable, 10 decay steps).
The warmups differ by design (ztrain's step s has lr * (s + 1) / warmup, transformers'
lr * s / warmup: docs/configuration.md), so the steps after warmup are compared, within 1e-9
relative. Exit 0: all equal; 1: a difference, named; 77: skipped (a package missing, unless
ZT_REQUIRE_INTEROP=1).
"""
import os
import sys
import tempfile

from interop_common import Failures, prepare_lines, read_metrics, require, run

torch, transformers = require("torch", "transformers")
from transformers import (get_cosine_with_min_lr_schedule_with_warmup,  # noqa: E402
                          get_linear_schedule_with_warmup, get_wsd_schedule)

FAIL = Failures()
STEPS, WARMUP, LR, LR_MIN, DECAY_FRACTION = 30, 5, 1e-3, 1e-4, 0.4


def ztrain_lrs(bin_dir, src_dir, work, name, keys, steps=STEPS, resume="never"):
    """The lr of each step's record of a `steps`-step run with `keys` set."""
    run_dir = os.path.join(work, name)
    rc, out = run([os.path.join(bin_dir, "ztrain"), "--config", os.path.join(src_dir, "inputs", "tiny.ini"),
                   "--data.train=" + os.path.join(work, "data", "train_*.bin"), "--run.dir=" + run_dir,
                   "--train.threads=1", f"--train.max_steps={steps}", f"--train.warmup_steps={WARMUP}",
                   f"--train.lr={LR}", "--train.sample_tokens=0", "--train.eval_every=0", "--run.tensorboard=false",
                   "--checkpoint.resume=" + resume] + keys)
    if rc != 0:
        sys.exit(f"FAILED: ztrain ({name}) exited {rc}: {out[-600:]}")
    return {r["step"]: r["lr"] for r in read_metrics(run_dir) if "lr" in r and "step" in r}


def cooldown(bin_dir, src_dir, work):
    """Steps 21..30 of a wsd run stopped at step 20 and resumed with a 10-step decay."""
    common = ["--train.schedule=wsd", f"--train.lr_min={LR_MIN}", "--checkpoint.every=10"]
    ztrain_lrs(bin_dir, src_dir, work, "cooldown", common, steps=20)
    lrs = ztrain_lrs(bin_dir, src_dir, work, "cooldown", common + ["--train.decay_steps=10"], resume="auto")
    return {k: v for k, v in lrs.items() if k > 20}


def hf_lrs(make):
    """Step k (1-based) -> the lr transformers' scheduler gives it."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
    sched = make(opt)
    lrs = {}
    for k in range(1, STEPS + 1):
        lrs[k] = sched.get_last_lr()[0]
        opt.step()
        sched.step()
    return lrs


def compare(name, got, want):
    FAIL.check(sorted(got) == list(range(1, STEPS + 1)), f"{name}: steps {sorted(got)[:5]}... in metrics.jsonl")
    for k in range(WARMUP + 1, STEPS + 1):
        g, w = got.get(k), want[k]
        FAIL.check(g is not None and abs(g - w) <= 1e-9 * max(abs(w), 1e-12),
                   f"{name}: step {k}: ztrain's lr {g}, transformers' {w}")


def main():
    bin_dir, src_dir = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as work:
        prepare_lines(bin_dir, work, "the schedules")
        decay = round(DECAY_FRACTION * (STEPS - WARMUP))
        for shape, hf_type in (("linear", "linear"), ("cosine", "cosine"), ("1-sqrt", "1-sqrt")):
            got = ztrain_lrs(bin_dir, src_dir, work, "wsd_" + shape,
                             ["--train.schedule=wsd", f"--train.decay_fraction={DECAY_FRACTION}",
                              f"--train.decay_shape={shape}", f"--train.lr_min={LR_MIN}"])
            want = hf_lrs(lambda o: get_wsd_schedule(o, num_warmup_steps=WARMUP,
                                                     num_stable_steps=STEPS - WARMUP - decay, num_decay_steps=decay,
                                                     decay_type=hf_type, min_lr_ratio=LR_MIN / LR))
            compare("wsd " + shape, got, want)
        got = cooldown(bin_dir, src_dir, work)
        want = hf_lrs(lambda o: get_wsd_schedule(o, num_warmup_steps=WARMUP, num_stable_steps=STEPS - WARMUP - 10,
                                                 num_decay_steps=10, min_lr_ratio=LR_MIN / LR, decay_type="linear"))
        FAIL.check(sorted(got) == list(range(21, STEPS + 1)), f"cooldown: resumed steps {sorted(got)}")
        for k in range(21, STEPS + 1):
            FAIL.check(k in got and abs(got[k] - want[k]) <= 1e-9 * want[k],
                       f"cooldown: step {k}: ztrain's lr {got.get(k)}, transformers' {want[k]}")
        got = ztrain_lrs(bin_dir, src_dir, work, "cosine", ["--train.schedule=cosine", f"--train.lr_min={LR_MIN}"])
        compare("cosine", got, hf_lrs(lambda o: get_cosine_with_min_lr_schedule_with_warmup(
            o, num_warmup_steps=WARMUP, num_training_steps=STEPS, min_lr=LR_MIN)))
        got = ztrain_lrs(bin_dir, src_dir, work, "linear", ["--train.schedule=linear", "--train.lr_min=0"])
        compare("linear", got, hf_lrs(lambda o: get_linear_schedule_with_warmup(
            o, num_warmup_steps=WARMUP, num_training_steps=STEPS)))
    sys.exit(FAIL.report(f"5 schedules and a cooldown, steps {WARMUP + 1}..{STEPS}: ztrain's lr equals transformers'"))


if __name__ == "__main__":
    main()
