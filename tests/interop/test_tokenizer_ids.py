"""zt-prepare's token ids against Hugging Face's `tokenizers`, id for id.

    python test_tokenizer_ids.py BIN_DIR SOURCE_DIR

For each real tokenizer.json (GPT-2's in tests/data/hf; Llama 3's and Qwen2.5's, with its
NFC normalizer and single-digit split, in ../shared/data, when that folder is there), a multilingual text of more than 100 kB (prose, code, emoji with
joiners and skin tones, CJK, right-to-left scripts, numbers, runs of spaces, tabs and
newlines, combining characters and NFD text, contractions in any case, digit runs in several
scripts) is written as one document. zt-prepare
tokenizes it into a token shard; `tokenizers.Tokenizer.from_file(...).encode(text,
add_special_tokens=False)` must give the same ids after the document separator zt-prepare
writes first. A difference names the tokenizer, the first differing position, both ids and
the text around it. Exit 0: equal; 1: a difference; 77: skipped (no `tokenizers`, unless
ZT_REQUIRE_INTEROP=1).
"""
import gzip
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

from interop_common import require, shared_data_path

tokenizers, = require("tokenizers")

PIECES = [
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see, they've said, I'M SURE.",
    "def train(model, steps=1_000):\n\tfor i in range(steps):\n        loss = model(i) ** 2  # squared\n",
    "int main() {\n    std::vector<float> v(1 << 20, 0.5f);\n    return v.size() > 0 ? 0 : 1;\n}\n",
    "Emoji: 😀😃🙂 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️‍🔥 ✌🏿",
    "中文：机器学习是人工智能的一个分支。日本語：今日はいい天気ですね。한국어: 안녕하세요, 반갑습니다.",
    "العربية: مرحبا بالعالم. עברית: שלום עולם. Русский: Привет, мир! Ελληνικά: Γειά σου Κόσμε.",
    "Numbers: 0 7 42 123 1234 12345 3.14159 2,718,281 1e-5 0x1F 100000000000000000000 -273.15",
    "Spaces:    four, then a tab\tand two\t\ttabs,   trailing   \n\n\nthree newlines\r\nCRLF.",
    "Combining: e\u0301 a\u0308 n\u0303 Vie\u0323\u0302t Nam, \u00e9 vs e\u0301, Zalgo: Z\u0351\u034b\u0354a\u0301\u0300.",
    "Mixed: naïve café résumé coöperate — “quotes” ‘single’ … «guillemets» 1st 2nd 3rd ½ ¾ ™ ©.",
    "URLs and paths: https://example.org/a/b?c=d&e=f#g C:\\Users\\me\\file.txt /usr/local/bin/ztrain",
    "   leading spaces and a line of dashes ----- and ===== and ***** and .....",
    "NFC: \u1100\u1161\u11a8 \u1112\u1161\u11ab\uac00\u11a8 a\u0301\u0316 q\u0307\u0323 \u212b \u2126 \uf900 "
    "\u0958 o\u031b\u0301 \u1e0b\u0323 \u00c5\u0301; digits: \u0663\u0664\u0665 \uff11\uff12\uff13 \u00b2 \u2167 99999.",
    # Regex stress: digit runs of every length and script, contractions in any case and with
    # curly quotes, CJK with its punctuation, emoji sequences, whitespace runs of every kind.
    "Digits: 1 12 123 1234 12345 123456 1234567 x2y33z444w5555 \u0660\u0661\u0662\u0663\u0664 "
    "\u2460\u2461\u2462 \u2177 3\u00bd 12,345,678.901 v1.2.3-rc4 0000000000000001",
    "Contractions: I'M you'RE they'Ve he'D she'LL it'S IT's we've y'all o'clock rock'n'roll "
    "'tis don\u2019t ''s 'S' 'LLama 'Dd '\u017f x's'",
    "CJK: \u6f22\u5b57\u304b\u306a\u30ab\u30ca\uff08\u62ec\u5f27\uff09\u300c\u5f15\u7528\u300d\u3002"
    "\U00020000\U0002a6d6 \u4e00\u4e8c\u4e09123abc \u3000\u5168\u89d2\u3000\u7a7a\u767d",
    "Emoji runs: 1\ufe0f\u20e3 #\ufe0f\u20e3 \U0001f469\U0001f3fd\u200d\U0001f4bb\U0001f680x "
    "\U0001f1fa\U0001f1f8\U0001f1ec\U0001f1e7 \U0001f600\U0001f600\U0001f600! a\U0001f44d b",
    "Whitespace:\u00a0\u00a0x \u3000 y\t \n \r\n\r\n   \u2003z   \n\n\n  w    \u2009\u200a\u202f"
    "\u205f end \x0b\x0c\x1c\x1d\x1e\x1f \t\t\t\n\t\t\tlast   ",
    "NFD text: Tie\u0302\u0301ng Vie\u0323\u0302t co\u0301 da\u0302\u0301u, \u1100\u1161\u11a8\u1100\u1161, "
    "A\u030a A\u0328\u0301 x\u0327\u030c \u0915\u093c \u05d1\u05bc\u05b8 \u0627\u0653 n\u0303o\u0308\u0304.",
]


def multilingual_text(min_bytes=102400, seed=1234):
    """A deterministic mix of the pieces, past min_bytes of UTF-8."""
    rng = random.Random(seed)
    parts = []
    size = 0
    while size < min_bytes:
        piece = rng.choice(PIECES)
        sep = rng.choice([" ", "\n", "\n\n", "  ", "\t", ""])
        parts.append(piece + sep)
        size += len((piece + sep).encode("utf-8"))
    return "".join(parts)


def read_shard(path):
    """The token ids of an llm.c shard (256 int32 header: magic, version, count)."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        version, count = header[1], header[2]
        width = {1: ("H", 2), 2: ("I", 4)}[version]
        data = f.read(count * width[1])
    return list(struct.unpack("<%d%s" % (count, width[0]), data))


def prepare_ids(bin_dir, work, name, tokenizer_json, text):
    """zt-prepare's ids of `text` as one document, without the document separator it writes first."""
    doc = os.path.join(work, name + ".txt")
    with open(doc, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    out = os.path.join(work, name + "-shards")
    subprocess.run([os.path.join(bin_dir, "zt-prepare"), "--input", doc, "--output", out, "--tokenizer",
                    tokenizer_json, "--val-fraction", "0"], check=True, stdout=subprocess.DEVNULL)
    return read_shard(os.path.join(out, "train_000000.bin"))[1:]


def compare(name, tokenizer_json, bin_dir, work, text):
    """zt-prepare's ids of `text` against tokenizers'; returns a message, '' when equal."""
    body = prepare_ids(bin_dir, work, name, tokenizer_json, text)
    theirs = tokenizers.Tokenizer.from_file(tokenizer_json).encode(text, add_special_tokens=False).ids
    if body == theirs:
        print(f"{name}: {len(theirs)} ids of {len(text.encode('utf-8'))} bytes equal tokenizers {tokenizers.__version__}'s")
        return ""
    at = next((i for i, (a, b) in enumerate(zip(body, theirs)) if a != b), min(len(body), len(theirs)))
    enc = tokenizers.Tokenizer.from_file(tokenizer_json).encode(text, add_special_tokens=False)
    where = enc.offsets[at][0] if at < len(enc.offsets) else len(text)
    return (f"{name}: zt-prepare gives {len(body)} ids, tokenizers {len(theirs)}; first difference at id {at}: "
            f"{body[at:at + 3]} vs {theirs[at:at + 3]}, text {text[max(0, where - 20):where + 20]!r}")


def unzip(src, dst):
    with gzip.open(src, "rb") as f, open(dst, "wb") as g:
        shutil.copyfileobj(f, g)
    return dst


def main(bin_dir, src_dir):
    text = multilingual_text()
    shared = shared_data_path(src_dir)
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-interop-") as work:
        cases = [("gpt2", unzip(os.path.join(src_dir, "tests", "data", "hf", "gpt2_tokenizer.json.gz"),
                                os.path.join(work, "gpt2.json")))]
        for name in ("llama3", "qwen2_5"):
            packed = os.path.join(shared, "tokenizers", name, "tokenizer.json.gz")
            if os.path.exists(packed):
                cases.append((name, unzip(packed, os.path.join(work, name + ".json"))))
            else:
                print(f"{name}: skipped: {packed} not found (ZT_SHARED_DATA names the shared data folder)")
        for name, path in cases:
            msg = compare(name, path, bin_dir, work, text)
            if msg:
                failures.append(msg)
    for msg in failures:
        print("FAILED: " + msg)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
