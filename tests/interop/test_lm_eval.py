"""lm-evaluation-harness scores a ztrain export as zt-eval does.

    python test_lm_eval.py BIN_DIR SOURCE_DIR

A tiny GPT-2 (tiny.ini, seq_len 96, GPT-2's tokenizer as zt-prepare --tokenizer gpt2 reads
it) trains 12 steps; zt-consolidate --output DIR/ exports it with its tokenizer files. The
test writes 60 examples in HellaSwag's layout (activity_label, ctx_a, ctx_b, endings, label;
some with WikiHow's [title] / [header] artifacts) to a JSON Lines file, and a local task in
lm-eval's YAML format over it: the hellaswag task's own process_docs, doc_to_text,
doc_to_choice and metrics, the data from the local file (no hub download; HF_HUB_OFFLINE and
HF_DATASETS_OFFLINE set). Then `lm_eval --model hf --model_args pretrained=DIR,dtype=float32
--device cpu --log_samples` and `zt-eval DIR --per-item` score it:
  - acc and acc_norm are equal (the same examples right, example by example), and so are
    acc_norm's divisors (the harness's len(choice), zt-eval's chars; a few endings have
    more bytes than characters);
  - every ending's log-likelihood agrees within 1e-4 relative.
Exit 0: all equal; 1: a difference, named; 77: skipped (a package missing, unless
ZT_REQUIRE_INTEROP=1).
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

from export_common import ZtrainRuns, choice_items, gpt2_files, write_jsonl
from interop_common import Failures, require

require("lm_eval", "transformers", "torch", "datasets")

TASK = "zt_hellaswag_local"
ITEMS = 60
FAIL = Failures()
TASK_YAML = """task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {data}
output_type: multiple_choice
validation_split: validation
process_docs: !function utils.process_docs
doc_to_text: "{{{{query}}}}"
doc_to_target: "{{{{label}}}}"
doc_to_choice: "choices"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def write_task(folder, data):
    """The local task: hellaswag.yaml's fields over DATA, with the harness's own process_docs."""
    os.makedirs(folder)
    with open(os.path.join(folder, TASK + ".yaml"), "w") as f:
        f.write(TASK_YAML.format(task=TASK, data=data))
    with open(os.path.join(folder, "utils.py"), "w") as f:
        f.write("from lm_eval.tasks.hellaswag.utils import process_docs  # noqa: F401 (the hellaswag task's)\n")


def run_lm_eval(model_dir, task_dir, out_dir):
    """lm_eval on the export (CPU, fp32); (its results for the task, its samples by doc_id, seconds)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_CACHE=os.path.join(out_dir, "datasets-cache"), TOKENIZERS_PARALLELISM="false")
    cmd = [os.path.join(os.path.dirname(sys.executable), "lm_eval"), "--model", "hf", "--model_args",
           f"pretrained={model_dir},dtype=float32", "--tasks", TASK, "--include_path", task_dir, "--device", "cpu",
           "--batch_size", "8", "--output_path", out_dir, "--log_samples"]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=480)
    seconds = time.time() - t0
    if p.returncode != 0:
        raise RuntimeError(f"lm_eval exited {p.returncode}: {p.stdout[-2000:]}")
    results = glob.glob(os.path.join(out_dir, "**", "results_*.json"), recursive=True)
    samples = glob.glob(os.path.join(out_dir, "**", f"samples_{TASK}_*.jsonl"), recursive=True)
    if len(results) != 1 or len(samples) != 1:
        raise RuntimeError(f"lm_eval wrote results {results} and samples {samples} (one of each expected)")
    with open(results[0]) as f:
        result = json.load(f)["results"][TASK]
    with open(samples[0]) as f:
        by_doc = {s["doc_id"]: s for s in map(json.loads, f)}
    return result, by_doc, seconds


def compare(zt_result, zt_items, lm_result, lm_samples):
    """Totals, each example's verdicts and each ending's log-likelihood; the largest relative difference."""
    for metric in ("acc", "acc_norm"):
        FAIL.check(abs(zt_result[metric] - lm_result[metric + ",none"]) < 1e-12,
                   f"{metric}: zt-eval {zt_result[metric]!r}, lm-eval {lm_result[metric + ',none']!r}")
    FAIL.check(len(lm_samples) == len(zt_items) == ITEMS,
               f"lm-eval scored {len(lm_samples)} examples, zt-eval {len(zt_items)}, the task has {ITEMS}")
    worst = 0.0
    for item in zt_items:
        s = lm_samples.get(item["index"])
        if s is None:
            continue
        lm_ll = [float(r[0]) for r in s["filtered_resps"]]
        # acc_norm's divisors: the harness's len(choice) of its processed doc, zt-eval's chars.
        chars = [len(c) for c in s["doc"]["choices"]]
        FAIL.check(item["chars"] == chars, f"example {item['index']}: zt-eval's ending lengths {item['chars']}, "
                   f"the harness's len(choice) {chars}")
        for k, (a, b) in enumerate(zip(item["loglik"], lm_ll)):
            rel = abs(a - b) / abs(b)
            worst = max(worst, rel)
            FAIL.check(rel <= 1e-4, f"example {item['index']} ending {k}: zt-eval's log-likelihood {a!r}, "
                       f"lm-eval's {b!r} (relative {rel:.2e} > 1e-4)")
        best = max(range(len(lm_ll)), key=lambda k: item["loglik"][k])
        best_norm = max(range(len(lm_ll)), key=lambda k: item["loglik"][k] / item["chars"][k])
        for metric, chosen in (("acc", best), ("acc_norm", best_norm)):
            FAIL.check(float(chosen == item["label"]) == s[metric], f"example {item['index']}: zt-eval's {metric} "
                       f"picks ending {chosen} (label {item['label']}), lm-eval's {metric} is {s[metric]}")
    return worst


def main(bin_dir, src_dir):
    with tempfile.TemporaryDirectory(prefix="zt-interop-") as work:
        runs = ZtrainRuns(bin_dir, src_dir, work)
        g = gpt2_files(src_dir, work)
        data = runs.prepare("gpt2", ["--tokenizer", "gpt2", "--vocab", g["vocab"], "--merges", g["merges"]])
        ckpt = runs.train("gpt2", data, ["--config", os.path.join(runs.src, "inputs", "tiny.ini"),
                                         "--model.vocab_size=50257", "--model.seq_len=96", "--train.max_steps=12"])
        model_dir = runs.path("export")
        runs.consolidate(ckpt, model_dir)
        write_jsonl(runs.path("items.jsonl"), choice_items(ITEMS, seed=23))
        write_task(runs.path("task"), runs.path("items.jsonl"))
        zt_result, zt_items = runs.zt_eval_per_item(model_dir, "items.jsonl", "export")
        try:
            lm_result, lm_samples, seconds = run_lm_eval(model_dir, runs.path("task"), runs.path("lm-eval-out"))
        except RuntimeError as e:
            FAIL.check(False, str(e))
            return FAIL.report("")
        worst = compare(zt_result, zt_items, lm_result, lm_samples)
    import lm_eval
    return FAIL.report(f"lm-eval {lm_eval.__version__} ({seconds:.0f} s) and zt-eval agree on {ITEMS} examples: "
                       f"acc {zt_result['acc']:.4f}, acc_norm {zt_result['acc_norm']:.4f}, log-likelihoods within "
                       f"{worst:.1e}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
