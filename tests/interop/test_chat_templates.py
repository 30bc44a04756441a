"""zt-prepare's chat examples against transformers' apply_chat_template, token for token.

    python test_chat_templates.py BIN_DIR SOURCE_DIR

For Llama 3's and Qwen2.5's real tokenizer.json and tokenizer_config.json (../shared/data,
the model's own Jinja chat_template), 200 generated conversations (system or not, an empty
system, multi-turn, leading and trailing whitespace of every kind, combining marks, digits,
CJK) go through `zt-prepare` (template llama3 / chatml, detected from tokenizer_config.json).
For each conversation:
  - its tokens equal `tokenizer.apply_chat_template(messages, tokenize=True)`'s, except for
    the known differences, each asserted as exactly that difference (README "Fine-tuning
    data"): Llama 3's shared template appends an assistant header even without
    add_generation_prompt (its tokens end Hugging Face's ids); Qwen's template adds a default
    system message when there is none (its tokens start Hugging Face's ids); and in chatml,
    content that starts with whitespace holding a line break tokenizes differently, since
    ztrain tokenizes ROLE\\n and CONTENT apart (a Hugging Face "\\n\\n" becomes "\\n" "\\n"):
    where tokenizing a message apart changes its ids (and only there), the ids differ but
    decode to the same text;
  - its target mask is exactly the tokens that lie within an assistant message's content or
    its end-of-turn token, located by character offsets in the text that
    apply_chat_template(tokenize=False) renders (Hugging Face's token offsets, or where the
    ids differ, the offsets of ztrain's tokens' bytes).
Exit 0: as expected; 1: a difference; 77: skipped (a package or the shared data missing,
unless ZT_REQUIRE_INTEROP=1).
"""
import gzip
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unicodedata

from interop_common import Failures, require, shared_data

transformers, = require("transformers")

CONVERSATIONS = 200
QWEN_DEFAULT_SYSTEM = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
LLAMA3_HEADER = "<|start_header_id|>assistant<|end_header_id|>\n\n"
# name, shared folder, template markers (before role, after role, end of turn, after turn)
MODELS = [
    ("llama3", "llama3", ("<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", "")),
    ("chatml", "qwen2_5", ("<|im_start|>", "\n", "<|im_end|>", "\n")),
]

CORES = [
    "Hello there, how are you?", "def f(x):\n    return x ** 2\n", "1234567 + 89 = 1234656",
    "机器学习很有趣。", "안녕하세요", "e\u0301te\u0301 cafe\u0301 Vie\u0323\u0302t", "👍🏽 👨‍👩‍👧 done",
    "It's 5 o'clock; we'll see.", "a\tb\t\tc", "line one\nline two\n\nline four", "Ω \u212b \u1100\u1161",
    "Answer: 42.", "   ", "x",
]
SPACES = ["", "", "", " ", "  ", "\n", "\n\n", " \n", "\t", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085 "]


def content(rng, nonblank):
    core = rng.choice(CORES[:-2] if nonblank else CORES)
    lead = rng.choice(SPACES) if rng.random() < 0.5 else ""
    return lead + core + rng.choice(SPACES)


def conversation(rng, index):
    """A deterministic conversation: an optional (sometimes empty) system, then turns."""
    msgs = []
    kind = index % 4
    if kind == 1:
        msgs.append({"role": "system", "content": ""})
    elif kind == 2:
        msgs.append({"role": "system", "content": content(rng, True)})
    for _ in range(rng.randint(1, 3)):
        msgs.append({"role": "user", "content": content(rng, False)})
        msgs.append({"role": "assistant", "content": content(rng, True)})
    if rng.random() < 0.2:
        msgs.append({"role": "user", "content": content(rng, False)})
    return msgs


def read_examples(path):
    """(tokens, targets) of each example of an example shard (version 3)."""
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    assert header[1] == 3, f"{path}: version {header[1]}, expected an example shard (3)"
    count, examples, width = header[2], header[3], header[4]
    at = 1024
    tokens = list(struct.unpack("<%d%s" % (count, "H" if width == 2 else "I"), data[at:at + count * width]))
    at += count * width
    targets = list(data[at:at + count])
    at += count
    starts = struct.unpack("<%dI" % (examples + 1), data[at:at + 4 * (examples + 1)])
    return [(tokens[a:b], targets[a:b]) for a, b in zip(starts, starts[1:])]


def target_spans(text, msgs, markers, norm):
    """Character spans [start, end) of each assistant content and its end-of-turn token in
    `text`, found by walking the rendering; `norm` is what the template (and the
    normalizer) does to a content. None when the text is not laid out so."""
    before, after_role, end_turn, after_turn = markers
    spans, at = [], 0
    for m in msgs:
        head = before + m["role"] + after_role
        body = norm(m["content"])
        if not text.startswith(head + body + end_turn + after_turn, at):
            return None
        start = at + len(head)
        at = start + len(body) + len(end_turn) + len(after_turn)
        if m["role"] == "assistant":
            spans.append((start, start + len(body) + len(end_turn)))
    return spans


def expected_mask(offsets, spans):
    """1 where a token's offsets lie inside a span; None when one straddles a span edge."""
    mask = []
    for a, b in offsets:
        inside = any(s <= a and b <= e for s, e in spans)
        if not inside and any(a < e and s < b for s, e in spans):
            return None
        mask.append(int(inside))
    return mask


def byte_offsets(tok, ids, text):
    """Character offsets in `text` of tokens whose bytes concatenate to text's UTF-8."""
    decoder = {v: k for k, v in _bytes_to_unicode().items()}
    added = {t.content for t in tok.backend_tokenizer.get_added_tokens_decoder().values()} if hasattr(
        tok.backend_tokenizer, "get_added_tokens_decoder") else set()
    offsets, pos = [], 0
    raw = text.encode("utf-8")
    char_at = [0] * (len(raw) + 1)
    n = 0
    for i, ch in enumerate(text):
        for _ in range(len(ch.encode("utf-8"))):
            char_at[n] = i
            n += 1
    char_at[n] = len(text)
    for t in ids:
        piece = tok.convert_ids_to_tokens(t)
        data = piece.encode("utf-8") if piece in added else bytes(decoder[c] for c in piece)
        assert raw.startswith(data, pos), f"token {t} does not continue the text at byte {pos}"
        offsets.append((char_at[pos], char_at[pos + len(data)] if pos + len(data) < len(raw) else len(text)))
        pos += len(data)
    return offsets


def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def split_changes_ids(tok, message):
    """Whether chatml's ROLE\\n and CONTENT tokenized apart (ztrain) differ from together."""
    head = message["role"] + "\n"
    enc = lambda t: tok.encode(t, add_special_tokens=False)  # noqa: E731
    return enc(head) + enc(message["content"]) != enc(head + message["content"])


def check_conversation(name, tok, msgs, ours, fail):
    """One conversation: ids and mask against apply_chat_template; returns the difference kind."""
    ids, mask = ours
    markers = dict((n, m) for n, _, m in MODELS)[name]
    text = tok.apply_chat_template(msgs, tokenize=False)
    theirs = list(tok.apply_chat_template(msgs, tokenize=True)["input_ids"])
    known = "equal"
    if name == "llama3":
        header = tok.encode(LLAMA3_HEADER, add_special_tokens=False)
        if not fail.check(text.endswith(LLAMA3_HEADER) and theirs[-len(header):] == header,
                          f"llama3: the template no longer appends an assistant header: {text[-60:]!r}"):
            return "bad"
        theirs, text = theirs[:-len(header)], text[:-len(LLAMA3_HEADER)]
        prefix = "<|begin_of_text|>"
        norm = str.strip
    else:
        prefix = ""
        norm = lambda s: s  # noqa: E731
        if msgs[0]["role"] != "system":
            default = tok.encode(QWEN_DEFAULT_SYSTEM, add_special_tokens=False)
            if not fail.check(text.startswith(QWEN_DEFAULT_SYSTEM) and theirs[:len(default)] == default,
                              f"chatml: Qwen's default system message is not where expected: {text[:80]!r}"):
                return "bad"
            theirs, text = theirs[len(default):], text[len(QWEN_DEFAULT_SYSTEM):]
            known = "default system"
    apart = [m for m in msgs if name == "chatml" and split_changes_ids(tok, m)]
    if apart:
        if not fail.check(all(re.match(r"\s*[\r\n]", m["content"]) for m in apart),
                          f"chatml: tokenizing ROLE\\n and CONTENT apart changes the ids of a content that does "
                          f"not start with a line break: {apart!r}"):
            return "bad"
        if not fail.check(ids != theirs and tok.decode(ids) == tok.decode(theirs),
                          f"chatml: content starting with a line break: expected ids that differ from "
                          f"apply_chat_template's but decode to the same text; ours {ids[:24]}, theirs {theirs[:24]}"):
            return "bad"
        normalize = (lambda s: unicodedata.normalize("NFC", s))  # noqa: E731
        text = normalize(text)
        offsets = byte_offsets(tok, ids, text)
        spans = target_spans(text[len(prefix):], msgs, markers, normalize)
        known = "newline start"
    else:
        if not fail.check(ids == theirs, f"{name}: ids differ from apply_chat_template's at "
                          f"{next((i for i, (a, b) in enumerate(zip(ids, theirs)) if a != b), min(len(ids), len(theirs)))}"
                          f": ours {ids[:40]}, theirs {theirs[:40]}; messages {msgs!r}"):
            return "bad"
        offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        spans = target_spans(text[len(prefix):], msgs, markers, norm)
    if not fail.check(spans is not None, f"{name}: the rendered text is not laid out as expected: {text[:200]!r}"):
        return "bad"
    spans = [(a + len(prefix), b + len(prefix)) for a, b in spans]
    want = expected_mask(offsets, spans)
    fail.check(want == mask, f"{name}: target mask {mask} differs from the assistant spans' {want} "
               f"(rendered {text!r})")
    return known


def prepare(bin_dir, work, name, folder, shared, convs):
    """Runs zt-prepare on the conversations with the model's files; its examples."""
    model_dir = os.path.join(work, name)
    os.makedirs(model_dir)
    with gzip.open(os.path.join(shared, "tokenizers", folder, "tokenizer.json.gz"), "rb") as f, \
            open(os.path.join(model_dir, "tokenizer.json"), "wb") as g:
        shutil.copyfileobj(f, g)
    shutil.copy(os.path.join(shared, "tokenizers", folder, "tokenizer_config.json"), model_dir)
    data = os.path.join(work, name + ".jsonl")
    with open(data, "w", encoding="utf-8") as f:
        for msgs in convs:
            f.write(json.dumps({"messages": msgs}) + "\n")
    out = os.path.join(work, name + "-shards")
    subprocess.run([os.path.join(bin_dir, "zt-prepare"), "--input", data, "--output", out, "--tokenizer",
                    os.path.join(model_dir, "tokenizer.json"), "--val-fraction", "0"], check=True,
                   stdout=subprocess.DEVNULL)
    return model_dir, read_examples(os.path.join(out, "train_000000.bin"))


def main(bin_dir, src_dir):
    shared = shared_data(src_dir)
    os.environ["HF_HUB_OFFLINE"] = "1"
    rng = random.Random(49)
    convs = [conversation(rng, i) for i in range(CONVERSATIONS)]
    fail = Failures()
    with tempfile.TemporaryDirectory(prefix="zt-interop-chat-") as work:
        for name, folder, _ in MODELS:
            model_dir, examples = prepare(bin_dir, work, name, folder, shared, convs)
            tok = transformers.AutoTokenizer.from_pretrained(model_dir)
            if not fail.check(len(examples) == len(convs), f"{name}: {len(examples)} examples, expected {len(convs)}"):
                continue
            kinds = {}
            for msgs, ours in zip(convs, examples):
                kind = check_conversation(name, tok, msgs, ours, fail)
                kinds[kind] = kinds.get(kind, 0) + 1
            print(f"{name} ({folder}): {len(convs)} conversations against transformers {transformers.__version__}: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    return fail.report("chat templates: tokens and target masks as apply_chat_template renders them")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
