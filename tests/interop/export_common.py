"""What the export tests share (test_hf_export.py, test_lm_eval.py): a corpus, the real
tokenizer files, a tiny ztrain run trained on them, its Hugging Face export, a HellaSwag-layout
task and zt-eval's per-item scores. Every ztrain executable runs with the test's work folder as
its working directory, so the run's relative data.train finds its tokenizer there (as it does
for a user who runs zt-consolidate where ztrain ran)."""
import gzip
import json
import os
import random
import shutil

from interop_common import run, shared_data_path

WORDS = ("the a man woman dog cat child player chef driver runs walks jumps throws catches cuts paints "
         "washes lifts opens ball knife brush car door window table garden kitchen street field "
         "red green small large quickly slowly then and while after before with into onto over").split()


def sentence(rng, n_min=5, n_max=12):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(n_min, n_max)))


def write_corpus(path, words=30000, seed=5):
    """ASCII prose of WORDS in sentences: every tokenizer splits it into common tokens."""
    rng = random.Random(seed)
    parts, n = [], 0
    while n < words:
        s = sentence(rng)
        parts.append(s[0].upper() + s[1:] + rng.choice([".", ".", ",", "!", "?"]))
        n += s.count(" ") + 1
    with open(path, "w") as f:
        f.write(" ".join(parts) + "\n")


def gpt2_files(src_dir, work):
    """GPT-2's tokenizer.json (tests/data/hf) and, made from it, the vocab.json + merges.txt
    that zt-prepare --tokenizer gpt2 reads: {"tokenizer.json": path, "vocab": path, "merges": path}."""
    folder = os.path.join(work, "gpt2_files")
    os.makedirs(folder, exist_ok=True)
    out = {"tokenizer.json": os.path.join(folder, "tokenizer.json"), "vocab": os.path.join(folder, "vocab.json"),
           "merges": os.path.join(folder, "merges.txt")}
    with gzip.open(os.path.join(src_dir, "tests", "data", "hf", "gpt2_tokenizer.json.gz"), "rb") as f:
        text = f.read()
    with open(out["tokenizer.json"], "wb") as f:
        f.write(text)
    model = json.loads(text)["model"]
    with open(out["vocab"], "w") as f:
        json.dump(model["vocab"], f, ensure_ascii=False)
    with open(out["merges"], "w") as f:
        f.write("#version: 0.2\n" + "".join((m if isinstance(m, str) else " ".join(m)) + "\n" for m in model["merges"]))
    return out


def llama3_tokenizer(src_dir, work):
    """Llama 3's tokenizer.json from ../shared/data (or ZT_SHARED_DATA, as test_tokenizer_ids
    reads it), decompressed into WORK; None without it."""
    shared = shared_data_path(src_dir)
    gz = os.path.join(shared, "tokenizers", "llama3", "tokenizer.json.gz")
    if not os.path.exists(gz):
        return None
    path = os.path.join(work, "llama3_tokenizer.json")
    with gzip.open(gz, "rb") as f, open(path, "wb") as out:
        shutil.copyfileobj(f, out)
    return path


class ZtrainRuns:
    """ztrain's executables in one work folder; each failure raises RuntimeError with the output."""

    def __init__(self, bin_dir, src_dir, work):
        self.bin, self.src, self.work = os.path.abspath(bin_dir), os.path.abspath(src_dir), work

    def exe(self, name, *args, check=True):
        rc, out = run([os.path.join(self.bin, name), *args], cwd=self.work)
        if check and rc != 0:
            raise RuntimeError(f"{name} {' '.join(args)} exited {rc}: {out[-1500:]}")
        return out

    def prepare(self, name, tokenizer_args):
        """zt-prepare of the corpus into WORK/data-NAME with the given --tokenizer arguments."""
        corpus = os.path.join(self.work, "corpus.txt")
        if not os.path.exists(corpus):
            write_corpus(corpus)
        self.exe("zt-prepare", "--input", "corpus.txt", "--output", "data-" + name, "--val-fraction", "0",
                 *tokenizer_args)
        return "data-" + name

    def train(self, name, data, args):
        """ztrain ARGS on DATA (np 1); the run's checkpoint directory (relative to WORK)."""
        self.exe("ztrain", f"--data.train={data}/train_*.bin", f"--run.dir=run-{name}", "--train.threads=1",
                 "--train.sample_tokens=0", "--checkpoint.resume=never", *args)
        return f"run-{name}/checkpoints"

    def consolidate(self, ckpt, out_dir, *args):
        """zt-consolidate CKPT --output OUT_DIR/ ARGS; zt-consolidate's output."""
        return self.exe("zt-consolidate", ckpt, "--output", out_dir + "/", *args)

    def path(self, relative):
        return os.path.join(self.work, relative)

    def zt_eval_per_item(self, model, task, tag):
        """zt-eval MODEL on TASK: (its --output JSON's task entry, --per-item lines)."""
        self.exe("zt-eval", model, "--tasks", task, "--threads", "1", "--output", f"eval-{tag}.json",
                 "--per-item", f"items-{tag}.jsonl")
        with open(self.path(f"eval-{tag}.json")) as f:
            result = json.load(f)
        with open(self.path(f"items-{tag}.jsonl")) as f:
            items = [json.loads(line) for line in f if line.strip()]
        name = os.path.splitext(os.path.basename(task))[0]
        return result["tasks"][name], items


def choice_items(n, seed=11):
    """N multiple-choice examples in HellaSwag's layout (activity_label, ctx_a, ctx_b, endings,
    label as a string), a few with the WikiHow artifacts ([title], [header]) that the
    harness's preprocess rewrites, a few with endings of more bytes than characters."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        ctx_a = sentence(rng, 6, 14).capitalize() + "."
        ctx_b = sentence(rng, 2, 5)
        endings = [sentence(rng, 3, 9) + "." for _ in range(4)]
        if i % 7 == 3:
            ctx_a = "[header] " + ctx_a + " [title] " + sentence(rng, 2, 4)
            endings[1] = endings[1] + " [step] " + sentence(rng, 2, 4)
        if i % 5 == 2:  # characters that are not bytes: acc_norm divides by characters
            endings[i % 4] = endings[i % 4][:-1] + " at the café, naïve señor — ok."
        items.append({"ind": i, "activity_label": rng.choice(["Cooking", "Painting a room", "Walking the dog",
                                                              "Washing a car", "Gardening"]),
                      "ctx_a": ctx_a, "ctx_b": ctx_b, "ctx": ctx_a + " " + ctx_b, "endings": endings,
                      "label": str(rng.randrange(4)), "split": "val", "split_type": "indomain",
                      "source_id": f"zt-{i}"})
    return items


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
