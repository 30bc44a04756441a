#!/usr/bin/env python3
"""ztrain side by side with what users would run instead (issue 50): one driver.

  python3 bench/peers/run.py [--shape tiny|small|124m] [--reps 3] [--steps 6] [--pairs 1,3,4]
                             [--curve] [--curve-steps 50] [--out FILE]

From the repository root. Writes, once, under --work (bench/work/peers): the corpus's token
shards (zt-prepare, GPT-2's tokenizer, the Vim documentation unless --corpus) and the
shared initial model per shape as a Hugging Face directory (make_init.py). Then runs each
pair's runs back to back, interleaved, --reps times, and writes the results file (commands,
versions, machine, load average, every repetition, medians, ratios against the issue's
goals). --curve adds the "same curve" check: ztrain and the Accelerate script fed the same
windows from the same init, one loss per step each, the largest relative difference, a
plot. The driver needs only the standard library; the peers run under --python (a venv
holding bench/peers/requirements.txt), the plot under /usr/bin/python3 with matplotlib.
"""
import argparse
import ctypes
import datetime
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from peers_common import LLAMA_LORA_TARGETS, LLAMA_SHAPES, QWEN_SHAPES, SHAPES  # noqa: E402  (stdlib + numpy-free)

GOALS = {"1": (3.0, 0.7), "2": (3.0, 0.7), "3": (3.0, 0.7), "4": (None, None), "5": (2.0, None), "6": (2.0, None),
         "7": (2.0, 0.7), "8": (None, None)}
# Training settings both sides get explicitly (ztrain's defaults, and what the peer is told).
TRAIN = dict(lr=3e-4, lr_min=3e-5, warmup=10, schedule="cosine", weight_decay=0.1, beta1=0.9,
             beta2=0.95, eps=1e-8, clip=1.0, seed=1337)


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per speed run")
    ap.add_argument("--skip", type=int, default=2, help="leading steps left out of a run's median")
    ap.add_argument("--pairs", default="1,3,4", help="comma-separated: 1 2 3 4 5 6 7")
    ap.add_argument("--pair4-dtypes", default="fp32,bf16",
                    help="pair 4's precisions (fp32 alone where PyTorch's bf16 products have no CPU kernels)")
    ap.add_argument("--lora-shape", choices=sorted(LLAMA_SHAPES), default="smollm2_360m",
                    help="pair 7 (LoRA, issue 51): the Llama shape")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--qwen-shapes", default="qwen2_5_0_5b,qwen3_0_6b", help="pair 8 (issue 52): Qwen shapes")
    ap.add_argument("--cores", type=int, default=os.cpu_count(), help="threads in all: np ranks get cores/np each")
    ap.add_argument("--curve", action="store_true", help="also the same-curve check (shape small)")
    ap.add_argument("--curve-only", action="store_true")
    ap.add_argument("--curve-steps", type=int, default=50)
    ap.add_argument("--curve-np", type=int, default=2)
    ap.add_argument("--bf16-steps", type=int, default=0, help="with --curve: also N steps of each in bf16 (0: not)")
    ap.add_argument("--python", default=os.environ.get("PEERS_PYTHON",
                                                         os.environ.get("ZT_INTEROP_VENV", os.path.join(ROOT, ".venv"))
                                                         + "/bin/python"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default=os.path.join(ROOT, "bench", "work", "peers"))
    ap.add_argument("--corpus", default="/usr/share/vim/vim90/doc", help="text file(s) or folder for zt-prepare")
    ap.add_argument("--choice-items", type=int, default=200, help="pair 6: items of the multiple-choice task")
    ap.add_argument("--pair6-lm-batches", default="8",
                    help="pair 6: lm-evaluation-harness --batch_size values, comma-separated (a run each)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--reuse", action="store_true", help="take runs an earlier invocation finished (same names) as they are")
    return ap.parse_args()


class Bench:
    def __init__(self, a):
        self.a = a
        self.bin = os.path.join(a.build, "bin")
        self.runs = []  # every run's record, in the order run
        self.log = []
        os.makedirs(os.path.join(a.work, "runs"), exist_ok=True)
        os.makedirs(os.path.join(a.work, "logs"), exist_ok=True)
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        MASTER_ADDR="127.0.0.1", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
                        HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
        self.port = 29500 + os.getpid() % 1000

    # ---- one-time inputs -------------------------------------------------------------------
    def sh(self, cmd, log_name, env=None):
        path = os.path.join(self.a.work, "logs", log_name + ".log")
        with open(path, "w") as f:
            f.write("$ " + shlex.join(cmd) + "\n")
            f.flush()
            t0 = time.time()
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env or self.env, cwd=self.a.work).returncode
        if rc != 0:
            raise SystemExit(f"run.py: {shlex.join(cmd)} exited {rc}; see {path}")
        return time.time() - t0

    def data(self):
        d = os.path.join(self.a.work, "data")
        if not os.path.exists(os.path.join(d, "tokenizer.json")):
            tok = os.path.join(self.a.work, "gpt2_tokenizer.json")
            subprocess.run(f"zcat {shlex.quote(ROOT)}/tests/data/hf/gpt2_tokenizer.json.gz > {shlex.quote(tok)}",
                           shell=True, check=True)
            self.sh([os.path.join(self.bin, "zt-prepare"), "--input", self.a.corpus, "--output", d,
                     "--tokenizer", tok, "--val-fraction", "0.02"], "prepare")
        return os.path.join(d, "train_*.bin")

    def paragraphs(self):
        """The corpus's paragraphs (blank-line separated, at least 80 characters), in file order."""
        files = ([os.path.join(r, f) for r, _, fs in os.walk(self.a.corpus) for f in sorted(fs)]
                 if os.path.isdir(self.a.corpus) else [self.a.corpus])
        for path in sorted(files):
            with open(path, errors="replace") as f:
                for para in f.read().split("\n\n"):
                    if len(para.strip()) >= 80:
                        yield para.strip()

    def examples(self):
        """Pair 2's examples: the corpus's paragraphs as {"text": ...} lines, and their example
        shards (zt-prepare)."""
        d = os.path.join(self.a.work, "examples")
        jsonl = os.path.join(self.a.work, "examples.jsonl")
        if not os.path.exists(os.path.join(d, "tokenizer.json")):
            self.data()
            with open(jsonl, "w") as out:
                for para in self.paragraphs():
                    out.write(json.dumps({"text": para}) + "\n")
            self.sh([os.path.join(self.bin, "zt-prepare"), "--input", jsonl, "--output", d, "--tokenizer",
                     os.path.join(self.a.work, "gpt2_tokenizer.json"), "--val-fraction", "0.02"], "prepare_examples")
        return jsonl, os.path.join(d, "train_*.bin")

    def long_examples(self):
        """Pair 7's examples: the corpus's paragraphs joined into {"text": ...} lines of at least
        4,000 characters, each longer than any seq_len here, so every row is cut to seq_len
        on both sides and a step's work does not depend on which examples it draws (the two
        sides draw them in different orders)."""
        d = os.path.join(self.a.work, "long_examples")
        jsonl = os.path.join(self.a.work, "long_examples.jsonl")
        if not os.path.exists(os.path.join(d, "tokenizer.json")):
            self.data()
            with open(jsonl, "w") as out:
                text = ""
                for para in self.paragraphs():
                    text = (text + "\n\n" + para) if text else para
                    if len(text) >= 4000:
                        out.write(json.dumps({"text": text}) + "\n")
                        text = ""
            self.sh([os.path.join(self.bin, "zt-prepare"), "--input", jsonl, "--output", d, "--tokenizer",
                     os.path.join(self.a.work, "gpt2_tokenizer.json"), "--val-fraction", "0.02"],
                    "prepare_long_examples")
        return jsonl, os.path.join(d, "train_*.bin")

    def choice_task(self):
        """Pair 6's task, from the corpus: a sentence and the first three words of the one after
        it as the context (HellaSwag's ctx_a, ctx_b), that sentence's rest as the right ending
        and the rests of three other sentences as the wrong ones; and lm-eval's YAML for it
        (the hellaswag task's own process_docs, as tests/interop/test_lm_eval.py)."""
        import random
        folder = os.path.join(self.a.work, "choice_task")
        items = os.path.join(folder, "vim_choice.jsonl")
        if os.path.exists(items):
            return items, folder
        os.makedirs(folder, exist_ok=True)
        pairs, rests = [], []
        for para in self.paragraphs():
            sents = [" ".join(x.split()).rstrip(".") for x in para.replace("\n", " ").split(". ")]
            sents = [x for x in sents if 40 <= len(x) <= 200 and x.isascii() and len(x.split()) >= 7]
            pairs += list(zip(sents, sents[1:]))
            rests += [" ".join(x.split()[3:]) for x in sents]
        rng = random.Random(7)
        with open(items, "w") as out:
            for i, (a, b) in enumerate(rng.sample(pairs, self.a.choice_items)):
                words, label = b.split(), rng.randrange(4)
                endings = [r + "." for r in rng.sample(rests, 3)]
                endings.insert(label, " ".join(words[3:]) + ".")
                out.write(json.dumps({"ind": i, "activity_label": "Vim", "ctx_a": a + ".", "ctx_b": " ".join(words[:3]),
                                      "endings": endings, "label": str(label)}) + "\n")
        yaml = (f"task: vim_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    validation: {items}\n"
                "output_type: multiple_choice\nvalidation_split: validation\nprocess_docs: !function utils.process_docs\n"
                'doc_to_text: "{{query}}"\ndoc_to_target: "{{label}}"\ndoc_to_choice: "choices"\n'
                "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
                "  - metric: acc_norm\n    aggregation: mean\n    higher_is_better: true\nmetadata:\n  version: 1.0\n")
        with open(os.path.join(folder, "vim_choice.yaml"), "w") as f:
            f.write(yaml)
        with open(os.path.join(folder, "utils.py"), "w") as f:
            f.write("from lm_eval.tasks.hellaswag.utils import process_docs  # noqa: F401 (the hellaswag task's)\n")
        return items, folder

    def init(self, shape):
        d = os.path.join(self.a.work, f"init_{shape}")
        if not os.path.exists(os.path.join(d, "model.safetensors")):
            self.sh([self.a.python, os.path.join(HERE, "make_init.py"), "--shape", shape, "--out", d], f"init_{shape}")
            # zt-generate reads the tokenizer from the model directory.
            subprocess.run(["cp", os.path.join(self.a.work, "gpt2_tokenizer.json"), os.path.join(d, "tokenizer.json")],
                           check=True)
        return d

    # ---- commands ----------------------------------------------------------------------------
    def zt_cmd(self, name, shape, np_, steps, extra, train=TRAIN):
        init, micro = self.init(shape), micro_batch_of(shape)
        rss = os.path.join(self.a.work, "runs", name + ".rss")
        wrap = [os.path.join(HERE, "rss_wrap.sh"), rss, os.path.join(self.bin, "ztrain")]
        launch = [os.path.join(self.bin, "ztrun"), str(np_)] + wrap if np_ > 1 else wrap
        keys = {"model.from_hf": init, "data.train": self.train_glob, "train.micro_batch": micro,
                "train.grad_accum": 1, "train.max_steps": steps, "train.lr": train["lr"],
                "train.lr_min": train["lr_min"], "train.warmup_steps": train["warmup"],
                "train.schedule": train["schedule"], "train.weight_decay": train["weight_decay"],
                "train.beta1": train["beta1"], "train.beta2": train["beta2"], "train.eps": train["eps"],
                "train.grad_clip": train["clip"], "train.seed": train["seed"], "train.sample_tokens": 0,
                "train.threads": max(1, self.a.cores // np_), "checkpoint.async": "false",
                "checkpoint.resume": "never", "run.tensorboard": "false",
                "run.dir": os.path.join(self.a.work, "runs", name)}
        keys.update(extra)
        return launch + [f"--{k}={v}" for k, v in keys.items()]

    def peer_cmd(self, name, shape, mode, np_, steps, extra, train=TRAIN):
        script = os.path.join(HERE, "peer_train.py")
        args = ["--mode", mode, "--model", self.init(shape), "--train", self.train_glob,
                "--metrics", os.path.join(self.a.work, "runs", name + ".jsonl"),
                "--threads", str(max(1, self.a.cores // np_)), "--steps", str(steps),
                "--micro-batch", str(micro_batch_of(shape)), "--lr", str(train["lr"]), "--lr-min", str(train["lr_min"]),
                "--warmup", str(train["warmup"]), "--schedule", train["schedule"],
                "--weight-decay", str(train["weight_decay"]), "--beta1", str(train["beta1"]),
                "--beta2", str(train["beta2"]), "--eps", str(train["eps"]), "--clip", str(train["clip"]),
                "--seed", str(train["seed"])] + extra
        self.port += 1
        if mode == "accelerate":
            accelerate = os.path.join(os.path.dirname(self.a.python), "accelerate")
            mp = "bf16" if "bf16" in extra else "no"
            return [accelerate, "launch", "--cpu", "--num_processes", str(np_), "--num_machines", "1",
                    "--mpirun_hostfile", self.hostfile(np_), "--mixed_precision", mp, "--dynamo_backend", "no",
                    script] + args, {"MASTER_PORT": str(self.port)}
        if mode == "fsdp2":
            return [self.a.python, "-m", "torch.distributed.run", "--nproc_per_node", str(np_),
                    "--master_port", str(self.port), script] + args, {}
        return [self.a.python, script] + args, {}

    def hostfile(self, np_):
        path = os.path.join(self.a.work, f"hostfile_{np_}")
        with open(path, "w") as f:
            f.write(f"localhost slots={np_}\n")
        return path

    # ---- running and reading ---------------------------------------------------------------
    def finished(self, name):
        """--reuse: the load and wall time of a run an earlier invocation finished, or None."""
        path = os.path.join(self.a.work, "runs", name + ".done")
        if not (self.a.reuse and os.path.exists(path)):
            return None
        with open(path) as f:
            return json.load(f)

    def run(self, pair, label, side, name, cmd, env_extra, tokens_per_step):
        done = self.finished(name)
        if done is None:
            # An earlier invocation's run directory: ztrain refuses to start a fresh run over it.
            shutil.rmtree(os.path.join(self.a.work, "runs", name), ignore_errors=True)
            load_before = [round(x, 2) for x in os.getloadavg()]
            wall = self.sh(cmd, name, dict(self.env, **env_extra))
            done = {"load": load_before, "load_after": [round(x, 2) for x in os.getloadavg()], "wall_s": wall}
            with open(os.path.join(self.a.work, "runs", name + ".done"), "w") as f:
                json.dump(done, f)
        rec = {"pair": pair, "label": label, "side": side, "name": name, "cmd": shlex.join(cmd)}
        rec.update(done)
        rec.update(self.read_zt(name) if side == "ztrain" else self.read_peer(name))
        steps = rec["step_ms_all"][self.a.skip:] or rec["step_ms_all"]
        rec["step_ms"] = statistics.median(steps)
        if tokens_per_step is None:  # examples: target tokens vary per step; all of them over all the time
            targets = rec["targets_all"][self.a.skip:] or rec["targets_all"]
            rec["tokens_per_s"] = sum(targets) / (sum(steps) / 1e3)
        else:
            rec["tokens_per_s"] = tokens_per_step / (rec["step_ms"] / 1e3)
        self.runs.append(rec)
        print(f"{name}: {rec['tokens_per_s']:.0f} tok/s, {rec['step_ms']:.0f} ms/step, "
              f"RSS {[round(r / 1024) for r in rec['rss_kib']]} MiB, load {rec['load'][0]}", flush=True)
        return rec

    def read_zt(self, name):
        steps, losses, norms, val, targets = [], [], [], None, []
        with open(os.path.join(self.a.work, "runs", name, "metrics.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                if "loss" in r and "step_ms" in r:
                    steps.append(r["step_ms"])
                    if "targets" in r:
                        targets.append(r["targets"])
                    losses.append(r["loss"])
                    norms.append(r["grad_norm"])
                elif "val_loss" in r:
                    val = r["val_loss"]
        prefix = os.path.join(self.a.work, "runs", name + ".rss")
        rss, rank = [], 0
        while os.path.exists(f"{prefix}.{rank}"):
            with open(f"{prefix}.{rank}") as f:
                rss.append(int(f.read().split()[-1]))
            rank += 1
        return {"step_ms_all": steps, "losses": losses, "grad_norms": norms, "rss_kib": rss, "val_loss": val,
                "targets_all": targets}

    def read_peer(self, name):
        steps, losses, norms, summary, val, targets = [], [], [], {}, None, []
        with open(os.path.join(self.a.work, "runs", name + ".jsonl")) as f:
            for line in f:
                r = json.loads(line)
                if r.get("event") == "summary":
                    summary = r
                elif "val_loss" in r:
                    val = r["val_loss"]
                else:
                    steps.append(r["step_ms"])
                    targets.append(r.get("targets"))
                    losses.append(r["loss"])
                    norms.append(r["grad_norm"])
        return {"step_ms_all": steps, "losses": losses, "grad_norms": norms, "rss_kib": summary.get("rss_kib", []),
                "versions": summary.get("versions", {}), "val_loss": val, "targets_all": targets}

    # ---- generation (pair 5) ---------------------------------------------------------------
    def generate(self, label, side, name, shape, cache="dynamic"):
        init, prompt, n = self.init(shape), "The quick brown fox jumps over the lazy dog.", 128
        threads = str(self.a.cores)
        if side == "ztrain":
            cmd = [os.path.join(HERE, "rss_wrap.sh"), os.path.join(self.a.work, "runs", name + ".rss"),
                   os.path.join(self.bin, "zt-generate"), init, "--prompt", prompt, "--max-new-tokens", str(n),
                   "--temperature", "0", "--ignore-eos", "--threads", threads]
        else:
            cmd = [self.a.python, os.path.join(HERE, "hf_generate.py"), "--model", init, "--prompt", prompt,
                   "--max-new-tokens", str(n), "--threads", threads, "--cache", cache]
        load = os.getloadavg()
        self.sh(cmd, name)
        text = open(os.path.join(self.a.work, "logs", name + ".log")).read()
        if side == "ztrain":
            import re
            m = re.search(r"prompt (\d+) tokens in ([\d.]+) s .*generated (\d+) tokens in ([\d.]+) s", text)
            total = float(m.group(2)) + float(m.group(4))
            with open(os.path.join(self.a.work, "runs", name + ".rss.0")) as f:
                rss = [int(f.read().split()[-1])]
        else:
            r = json.loads(text.strip().splitlines()[-1])
            total, rss = r["total_s"], r["rss_kib"]
        rec = {"pair": "5", "label": label, "side": side, "name": name, "cmd": shlex.join(cmd),
               "load": [round(x, 2) for x in load], "step_ms": total * 1e3, "tokens_per_s": n / total,
               "rss_kib": rss, "losses": []}
        self.runs.append(rec)
        print(f"{name}: {rec['tokens_per_s']:.1f} new tok/s, load {rec['load'][0]}", flush=True)


    # ---- evaluation (pair 6) ---------------------------------------------------------------
    def evaluate(self, label, side, name, shape, batch=8):
        """One scoring of pair 6's task: items per second over the whole command (loading the
        model, tokenizing, scoring), and its acc for the record."""
        import glob as globmod
        init, (items, folder) = self.init(shape), self.choice_task()
        out = os.path.join(self.a.work, "runs", name)
        os.makedirs(out, exist_ok=True)
        rss = os.path.join(self.a.work, "runs", name + ".rss")
        if side == "ztrain":
            cmd = [os.path.join(HERE, "rss_wrap.sh"), rss, os.path.join(self.bin, "zt-eval"), init, "--tasks", items,
                   "--threads", str(self.a.cores), "--output", os.path.join(out, "eval.json")]
            env = {}
        else:
            lm_eval = os.path.join(os.path.dirname(self.a.python), "lm_eval")
            cmd = ["/usr/bin/time", "-f", "%M", "-o", rss + ".0", lm_eval, "--model", "hf", "--model_args",
                   f"pretrained={init},dtype=float32", "--tasks", "vim_choice", "--include_path", folder,
                   "--device", "cpu", "--batch_size", str(batch), "--output_path", out]
            env = {"HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": os.path.join(out, "datasets-cache"),
                   "OMP_NUM_THREADS": str(self.a.cores)}
        load = os.getloadavg()
        wall = self.sh(cmd, name, dict(self.env, **env))
        if side == "ztrain":
            with open(os.path.join(out, "eval.json")) as f:
                acc = json.load(f)["tasks"]["vim_choice"]["acc"]
        else:
            with open(globmod.glob(os.path.join(out, "**", "results_*.json"), recursive=True)[0]) as f:
                acc = json.load(f)["results"]["vim_choice"]["acc,none"]
        with open(rss + ".0") as f:
            peak = [int(f.read().split()[-1])]
        rec = {"pair": "6", "label": label, "side": side, "name": name, "cmd": shlex.join(cmd),
               "load": [round(x, 2) for x in load], "step_ms": wall * 1e3,
               "tokens_per_s": self.a.choice_items / wall, "rss_kib": peak, "losses": [], "acc": acc}
        self.runs.append(rec)
        print(f"{name}: {rec['tokens_per_s']:.1f} items/s (acc {acc:.3f}), load {rec['load'][0]}", flush=True)


def micro_batch_of(shape):
    for table in (LLAMA_SHAPES, QWEN_SHAPES):
        if shape in table:
            return table[shape]["micro_batch"]
    return SHAPES[shape][4]


def qwen_runs(b):
    """Pair 8 (issue 52): each Qwen shape on the corpus's windows, one process, fp32 and bf16:
    ztrain against transformers' model in the Accelerate script (one process: no DDP)."""
    a, runs = b.a, []
    for shape in [x for x in a.qwen_shapes.split(",") if x]:
        tokens = QWEN_SHAPES[shape]["seq_len"] * QWEN_SHAPES[shape]["micro_batch"]
        for dt in ("fp32", "bf16"):
            runs.append(("8", f"ztrain {shape} np 1 {dt}", "ztrain",
                         lambda n, shape=shape, dt=dt: (b.zt_cmd(n, shape, 1, a.steps, {"precision.dtype": dt}), {}),
                         tokens))
            runs.append(("8", f"transformers {shape} accelerate np 1 {dt}", "peer",
                         lambda n, shape=shape, dt=dt: b.peer_cmd(n, shape, "accelerate", 1, a.steps, ["--dtype", dt]),
                         tokens))
    return runs


def lora_runs(b):
    """Pair 7 (issue 51): a Llama fine-tuned on examples longer than seq_len, one per row cut to
    seq_len (ztrain's data.packing = pad, data.overlong = truncate; the peer's truncation with
    DataCollatorWithPadding): full rows on both sides whatever the order; np 2: ztrain's full
    fine-tuning, its LoRA in fp32 and bf16, and PEFT's LoRA under Accelerate in fp32 and bf16
    (autocast)."""
    a, shape = b.a, b.a.lora_shape
    jsonl, shards = b.long_examples()
    data = {"data.train": shards, "data.packing": "pad", "data.overlong": "truncate"}
    lora = dict(data, **{"lora.rank": a.lora_rank, "lora.alpha": 2 * a.lora_rank, "lora.targets": LLAMA_LORA_TARGETS})
    peer = ["--examples", jsonl, "--padding", "longest", "--lora", str(a.lora_rank),
            "--lora-alpha", str(2 * a.lora_rank), "--lora-targets", LLAMA_LORA_TARGETS]
    runs = [("7", "ztrain full fine-tuning np 2 fp32", "ztrain", lambda n: (b.zt_cmd(n, shape, 2, a.steps, data), {}))]
    for dt in ("fp32", "bf16"):
        keys = dict(lora, **{"precision.dtype": dt})
        runs.append(("7", f"ztrain LoRA r{a.lora_rank} np 2 {dt}", "ztrain",
                     lambda n, keys=keys: (b.zt_cmd(n, shape, 2, a.steps, keys), {})))
        runs.append(("7", f"PEFT LoRA r{a.lora_rank} accelerate np 2 padding=longest {dt}", "peer",
                     lambda n, dt=dt: b.peer_cmd(n, shape, "accelerate", 2, a.steps, peer + ["--dtype", dt])))
    return [(p, label, side, make, None) for p, label, side, make in runs]


# Pair 5 generates with GPT-2 124M and with SmolLM2-135M's Llama shape (the two).
GENERATION_SHAPES = {"124m": ["124m", "smollm2_135m"]}


def pair_runs(b, shape, pairs):
    """(pair, label, side, make(name) -> (cmd, env), tokens per step) of every speed run."""
    a, T, micro = b.a, SHAPES[shape][3], SHAPES[shape][4]
    runs = []
    if "1" in pairs:
        runs += [("1", "ztrain DDP np 2 fp32", "ztrain", lambda n: (b.zt_cmd(n, shape, 2, a.steps, {}), {}), 2),
                 ("1", "accelerate DDP np 2 fp32", "peer",
                  lambda n: b.peer_cmd(n, shape, "accelerate", 2, a.steps, []), 2)]
    if "2" in pairs:
        jsonl, shards = b.examples()
        for packing in ("pack", "pad"):
            keys = {"data.train": shards, "data.packing": packing, "data.overlong": "truncate"}
            runs.append(("2", f"ztrain DDP np 2 examples {packing}", "ztrain",
                         lambda n, keys=keys: (b.zt_cmd(n, shape, 2, a.steps, keys), {}), None))
        for padding in ("max_length", "longest"):
            runs.append(("2", f"accelerate DDP np 2 examples padding={padding}", "peer",
                         lambda n, padding=padding: b.peer_cmd(n, shape, "accelerate", 2, a.steps,
                                                               ["--examples", jsonl, "--padding", padding]), None))
    if "3" in pairs:
        runs += [("3", "ztrain ZeRO-3 np 2 fp32", "ztrain",
                  lambda n: (b.zt_cmd(n, shape, 2, a.steps, {"parallel.zero_stage": 3}), {}), 2),
                 ("3", "FSDP2 fully_shard np 2 fp32", "peer", lambda n: b.peer_cmd(n, shape, "fsdp2", 2, a.steps, []), 2)]
    if "4" in pairs:
        for dt in [x for x in a.pair4_dtypes.split(",") if x]:
            runs.append(("4", f"ztrain np 1 {dt}", "ztrain",
                         lambda n, dt=dt: (b.zt_cmd(n, shape, 1, a.steps, {"precision.dtype": dt}), {}), 1))
            for comp in (False, True):
                extra = ["--dtype", dt] + (["--compile"] if comp else [])
                runs.append(("4", f"torch {'compile' if comp else 'eager'} {dt}", "peer",
                             lambda n, extra=extra: b.peer_cmd(n, shape, "single", 1, a.steps, extra), 1))
    out = [(p, label, side, make, ranks and ranks * micro * T) for p, label, side, make, ranks in runs]
    return out + (lora_runs(b) if "7" in pairs else []) + (qwen_runs(b) if "8" in pairs else [])


def speed(b, shape, pairs, after_rep=lambda: None):
    """Every pair's runs in turn, --reps times; after_rep() once each repetition is done."""
    runs = pair_runs(b, shape, pairs)
    for rep in range(1, b.a.reps + 1):
        for p, label, side, make, tokens in runs:
            where = b.a.lora_shape if p == "7" else "" if p == "8" else shape  # pair 8's labels name theirs
            name = f"p{p}_{label.replace(' ', '_')}_{where}_r{rep}"
            cmd, env = make(name)
            b.run(p, label, side, name, cmd, env, tokens)
        for gen in (GENERATION_SHAPES.get(shape, [shape]) if "5" in pairs else []):
            b.generate(f"zt-generate {gen} greedy 128", "ztrain", f"p5_zt_{gen}_r{rep}", gen)
            b.generate(f"generate() {gen} DynamicCache greedy 128", "peer", f"p5_hf_{gen}_r{rep}", gen)
            b.generate(f"generate() {gen} static cache greedy 128", "peer", f"p5_hfstatic_{gen}_r{rep}", gen,
                       "static")
        if "6" in pairs:
            b.evaluate("zt-eval", "ztrain", f"p6_zt_{shape}_r{rep}", shape)
            for batch in b.a.pair6_lm_batches.split(","):
                suffix = "" if batch == "8" else f"_b{batch}"  # batch 8 keeps its earlier runs' names
                b.evaluate(f"lm-eval hf batch {batch}", "peer", f"p6_lm_{shape}{suffix}_r{rep}", shape, int(batch))
        after_rep()


CURVE_TRAIN = dict(TRAIN, lr=6e-4, lr_min=0.0, warmup=10, schedule="linear")


def curve(b, dtype="fp32", steps=None):
    """The same curve: shape small, both sides fed the same windows from the same init; with
    bf16 also one validation loss at the end (ztrain's train.eval_batches leading val windows)."""
    a, shape, np_ = b.a, "small", b.a.curve_np
    steps = steps or a.curve_steps
    val = b.train_glob.replace("train_", "val_")
    zt_name, pe_name = f"curve_ztrain_{dtype}", f"curve_peer_{dtype}"
    zt_keys = {"precision.dtype": dtype}
    peer_extra = ["--dtype", dtype]
    if dtype != "fp32":
        zt_keys.update({"data.val": val, "train.eval_every": 0})
        peer_extra += ["--val", val]
    tokens = np_ * SHAPES[shape][4] * SHAPES[shape][3]
    zt = b.run("curve", f"ztrain np {np_} {dtype}", "ztrain", zt_name,
               b.zt_cmd(zt_name, shape, np_, steps, zt_keys, CURVE_TRAIN), {}, tokens)
    mode = "accelerate" if np_ > 1 else "single"
    cmd, env = b.peer_cmd(pe_name, shape, mode, np_, steps, peer_extra, CURVE_TRAIN)
    pe = b.run("curve", f"{mode} np {np_} {dtype}", "peer", pe_name, cmd, env, tokens)
    png = b.out.replace(".md", f"_curve_{dtype}.png")
    subprocess.run(["/usr/bin/python3", os.path.join(HERE, "plot_curves.py"), "-o", png,
                    "--label", f"ztrain ({zt['label']})", os.path.join(a.work, "runs", zt_name, "metrics.jsonl"),
                    "--label", f"peer ({pe['label']})", os.path.join(a.work, "runs", pe_name + ".jsonl")], check=True)
    return zt, pe, png, dtype


# ---- the results file ------------------------------------------------------------------------
def machine():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    keep = ("Model name", "CPU(s):", "Thread(s) per core", "Core(s) per socket", "Flags", "Hypervisor vendor")
    lines = [ln for ln in out if ln.startswith(keep)]
    with open("/proc/meminfo") as f:
        lines.append(f.readline().strip())
    return lines


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def mib(kib):
    return kib / 1024.0


def speed_tables(b, w):
    labels = []
    for r in b.runs:
        if r["pair"] != "curve" and (r["pair"], r["label"]) not in labels:
            labels.append((r["pair"], r["label"]))
    w("## Every repetition\n")
    w("| pair | run | rep | load (1/5/15 min) before | tokens/s | step ms (median) | peak RSS per rank MiB |")
    w("|---|---|---|---|---|---|---|")
    summary = {}
    for pair, label in labels:
        rs = [r for r in b.runs if r["pair"] == pair and r["label"] == label]
        for i, r in enumerate(rs, 1):
            w(f"| {pair} | {label} | {i} | {' / '.join(str(x) for x in r['load'])} | {r['tokens_per_s']:.1f} | "
              f"{r['step_ms']:.0f} | {', '.join(f'{mib(k):.0f}' for k in r['rss_kib'])} |")
        summary[(pair, label)] = (med([r["tokens_per_s"] for r in rs]), med([r["step_ms"] for r in rs]),
                                  med([max(r["rss_kib"]) for r in rs if r["rss_kib"]]), rs[0]["side"], len(rs))
    w("\n## Medians and ratios\n")
    w("| pair | run | reps | tokens/s | step ms | peak RSS (largest rank) MiB |")
    w("|---|---|---|---|---|---|")
    for (pair, label), (tps, ms, rss, side, n) in summary.items():
        w(f"| {pair} | {label} | {n} | {tps:.1f} | {ms:.0f} | {mib(rss):.0f} |")
    return summary


def ratio_rows(summary):
    """(pair, ztrain run, peer run, tokens/s ratio, RSS ratio, goal text)."""
    rows = []
    by_pair = {}
    for (pair, label), v in summary.items():
        by_pair.setdefault(pair, []).append((label, v))
    for pair, items in by_pair.items():
        zts = [(lbl, v) for lbl, v in items if v[3] == "ztrain"]
        peers = [(lbl, v) for lbl, v in items if v[3] == "peer"]
        for zl, zv in zts:
            for pl, pv in peers:
                if pair in ("4", "7", "8") and zl.split()[-1] != pl.split()[-1]:
                    continue  # fp32 against fp32, bf16 against bf16
                if pair in ("5", "8") and zl.split()[1] != pl.split()[1]:
                    continue  # the same shape
                if pair == "7" and "full" in zl:
                    continue  # LoRA against LoRA; full fine-tuning is LoRA's own baseline (lora_ratios)
                tps = zv[0] / pv[0]
                rss = zv[2] / pv[2] if pv[2] == pv[2] and pv[2] else float("nan")
                if pair == "4":
                    goal_t, goal_r = (1.3 if "compile" in pl else 2.0), None
                else:
                    goal_t, goal_r = GOALS.get(pair, (None, None))
                met = (goal_t is None or tps >= goal_t) and (goal_r is None or rss <= goal_r)
                goal = (f"tokens/s >= {goal_t}x" + (f", RSS <= {goal_r}x" if goal_r else "") if goal_t
                        else "figures only")
                rows.append((pair, zl, pl, tps, rss, goal, "met" if met else "NOT met"))
    return rows


def sharding_ratios(summary, w):
    """Pair 3's second question: each side's ZeRO-3 (FSDP2) against its own DDP."""
    pick = {k[1]: v for k, v in summary.items()}
    sides = [("ztrain", "ztrain ZeRO-3 np 2 fp32", "ztrain DDP np 2 fp32"),
             ("peer", "FSDP2 fully_shard np 2 fp32", "accelerate DDP np 2 fp32")]
    if not all(z in pick and d in pick for _, z, d in sides):
        return
    w("\nZeRO-3 / DDP on each side (pair 3 against pair 1): " + "; ".join(
        f"{side}: tokens/s {pick[z][0] / pick[d][0]:.2f}x, peak RSS {pick[z][2] / pick[d][2]:.2f}x"
        for side, z, d in sides) + ".")


def lora_ratios(summary, w):
    """Pair 7's second question: ztrain's LoRA against its own full fine-tuning (goal: peak
    RSS at most 0.5x)."""
    pick = {k[1]: v for k, v in summary.items() if k[0] == "7"}
    full = next((v for k, v in pick.items() if "full" in k), None)
    if full is None:
        return
    for label, v in pick.items():
        if label.startswith("ztrain LoRA"):
            r = v[2] / full[2]
            w(f"\n{label} / ztrain full fine-tuning np 2 fp32: tokens/s {v[0] / full[0]:.2f}x, peak RSS {r:.2f}x "
              f"(goal <= 0.5x: {'met' if r <= 0.5 else 'NOT met'}).")


def openblas_kernels():
    """The kernels OpenBLAS picks in this environment (its own choice for the CPU, or
    OPENBLAS_CORETYPE's), as ztrain's ranks load it."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "unknown"


def write_report(b, summary_rows, curve_result):
    a = b.a
    lines = []
    w = lines.append
    today = datetime.date.today().isoformat()
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    versions = next((r["versions"] for r in b.runs if r.get("versions")), {})
    zt_version = subprocess.run([os.path.join(b.bin, "ztrain"), "--version"], capture_output=True, text=True).stdout.strip()
    w(f"# ztrain beside its peers, {today} (bench/peers/run.py)\n")
    w(f"Command: `python3 {' '.join(shlex.quote(x) for x in sys.argv)}` at {rev} ({zt_version}).  ")
    w(f"Peers: {', '.join(f'{k} {v}' for k, v in versions.items())} ({a.python}).  ")
    pairs = [p for p in a.pairs.split(",") if p]
    if any(p in "123456" for p in pairs):
        w(f"Shape of pairs 1-6: `{a.shape}` = n_layer, n_head, n_embd, seq_len, micro_batch {SHAPES[a.shape]}, "
          "GPT-2 vocabulary 50257.  ")
    if "7" in pairs:
        w(f"Shape of pair 7: `{a.lora_shape}` {LLAMA_SHAPES[a.lora_shape]} (Llama, GPT-2's vocabulary, tied), "
          f"LoRA r {a.lora_rank}, alpha {2 * a.lora_rank}, targets {LLAMA_LORA_TARGETS}.  ")
    if "8" in pairs:
        w("Shapes of pair 8: " + "; ".join(f"`{q}` {QWEN_SHAPES[q]}" for q in a.qwen_shapes.split(",") if q) + ".  ")
    w(f"{a.steps} steps per run, the first {a.skip} left out of each run's median; {a.cores} threads in all "
      f"(cores / ranks per rank, both sides).  ")
    w(f"BLAS: ztrain's fp32 products on OpenBLAS's {openblas_kernels()} kernels (OPENBLAS_CORETYPE "
      f"{os.environ.get('OPENBLAS_CORETYPE', 'unset')}); PyTorch's on its own MKL, which that variable does not touch.  ")
    w(f"Data: `zt-prepare --tokenizer` GPT-2's tokenizer.json on `{a.corpus}`; the peers read ztrain's "
      f"shards in ztrain's window order (bench/peers/peers_common.py).  ")
    loads = [r["load"][0] for r in b.runs]
    # Back to back, the runs' own threads keep the load near the cores; above 1.5x of them
    # something else was running.
    if loads and med(loads) > 1.5 * a.cores:
        w(f"**Preliminary**: the machine was shared; the 1-minute load average before the runs was "
          f"{min(loads)} to {max(loads)} (median {med(loads):.1f}) on {a.cores} cores, so every figure is "
          f"noisy; the interleaving spreads the noise over both sides, not away.  ")
    w("Machine:\n")
    w("```\n" + "\n".join(machine()) + "\n```\n")
    if summary_rows is not None:
        summary, rows = summary_rows
        w("## Ratios against the issue's goals (ratio of medians)\n")
        w("| pair | ztrain | peer | tokens/s ztrain / peer | peak RSS ztrain / peer | goal | |")
        w("|---|---|---|---|---|---|---|")
        for pair, zl, pl, t, r, goal, met in rows:
            w(f"| {pair} | {zl} | {pl} | {t:.2f} | {r:.2f} | {goal} | {met} |")
        sharding_ratios(summary, w)
        lora_ratios(summary, w)
        w("")
        speed_tables(b, w)
    for c in curve_result or []:
        curve_section(b, w, *c)
    w("\n## Commands\n")
    for r in b.runs:
        w(f"- `{r['name']}`: `{r['cmd']}`")
    with open(b.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {b.out}")


def curve_section(b, w, zt, pe, png, dtype):
    w(f"\n## The same curve, {dtype}\n")
    w(f"Shape `small` {SHAPES['small']}, {dtype}, {len(zt['losses'])} steps, {zt['label']} against {pe['label']}, "
      f"settings {CURVE_TRAIN}.\n")
    if dtype != "fp32":
        vz, vp = zt["val_loss"], pe["val_loss"]
        rel = abs(vz - vp) / abs(vp)
        w(f"Final validation loss: ztrain {vz:.5f}, peer {vp:.5f}, relative difference {rel:.2e} "
          f"(goal < 1%: {'met' if rel < 0.01 else 'NOT met'}).\n")
    w(f"![loss curves]({os.path.basename(png)})\n")
    w("| step | ztrain loss | peer loss | relative difference | ztrain grad norm | peer grad norm |")
    w("|---|---|---|---|---|---|")
    worst = 0.0
    for i, (x, y) in enumerate(zip(zt["losses"], pe["losses"]), 1):
        rel = abs(x - y) / abs(y)
        worst = max(worst, rel)
        w(f"| {i} | {x:.7f} | {y:.7f} | {rel:.2e} | {zt['grad_norms'][i - 1]:.5f} | {pe['grad_norms'][i - 1]:.5f} |")
    goal = "goal < 1e-4" if dtype == "fp32" else "no goal per step in bf16"
    w(f"\nLargest relative difference of the losses: **{worst:.2e}** ({goal}"
      + (f": {'met' if worst < 1e-4 else 'NOT met'}" if dtype == "fp32" else "") + ").")


def main():
    a = parse()
    if a.curve_only:
        a.curve = True
    b = Bench(a)
    b.out = a.out or os.path.join(ROOT, "bench", "results", f"peers_{datetime.date.today().isoformat()}.md")
    b.train_glob = b.data()
    pairs = [p for p in a.pairs.split(",") if p]
    summary_rows = None

    def report_so_far():  # a run stopped early still leaves the repetitions it finished
        summary = speed_tables(b, lambda _: None)
        write_report(b, (summary, ratio_rows(summary)), [])

    if not a.curve_only:
        speed(b, a.shape, pairs, report_so_far)
    curve_result = []
    if a.curve:
        curve_result.append(curve(b))
        if a.bf16_steps:
            curve_result.append(curve(b, "bf16", a.bf16_steps))
    if not a.curve_only:
        summary = speed_tables(b, lambda _: None)
        summary_rows = (summary, ratio_rows(summary))
    write_report(b, summary_rows, curve_result)


if __name__ == "__main__":
    main()
