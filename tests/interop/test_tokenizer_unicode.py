"""Every code point through zt-prepare's NFC (utf8proc) and pre-tokenizer regexes (PCRE2)
against Hugging Face's `tokenizers`; the characters where their Unicode versions differ are
listed here, exactly.

    python test_tokenizer_unicode.py BIN_DIR SOURCE_DIR

- NFC: a tokenizer.json with the NFC normalizer, a vocabulary of the 256 byte tokens and no
  merges makes zt-prepare's ids the bytes of its normalized text. Each code point of planes
  0-3 and 14 is probed alone, after "a" + U+0301 (class 230), before U+0334 (class 1),
  after "e", and decomposed (unicodedata's NFD), one probe a line; the lines that differ from
  `tokenizers.normalizers.NFC()` must belong to exactly the code points of NFC_NEWER_UNICODE:
  combining marks whose class or composition Unicode gave after the data `tokenizers` uses
  (utf8proc 2.8 has Unicode 15.0).
- Regexes: a line "a{c}b {c}1 {c}" per code point, the code points of REGEX_NEWER_UNICODE
  and NFC_NEWER_UNICODE left out, through GPT-2's tokenizer.json (ByteLevel's regex) and
  Qwen2.5's (NFC, its Split regex): ids equal `tokenizers`' (skipped for Qwen2.5 without
  ../shared/data). REGEX_NEWER_UNICODE are the letters and numbers assigned in Unicode 15
  and 16, which PCRE2 10.42 (Unicode 14) classifies as unassigned, and U+180E, which PCRE2's
  \\s matches (it is in its \\h) and Oniguruma's does not.
Exit 0: as listed; 1: a difference; 77: skipped (no `tokenizers`, unless ZT_REQUIRE_INTEROP=1).
"""
import json
import os
import sys
import tempfile
import unicodedata

from interop_common import Failures, require, shared_data_path
from test_tokenizer_ids import prepare_ids, unzip

tokenizers, = require("tokenizers")

NFC_NEWER_UNICODE = [int(c, 16) for c in """
07FD 0898 0899 089A 089B 089C 089D 089E 089F 08CA 08CB 08CC 08CD 08CE 08CF 08D0 08D1 08D2 08D3
09FE 0C3C 0D3B 0D3C 0EBA 1715 1ABF 1AC0 1AC1 1AC2 1AC3 1AC4 1AC5 1AC6 1AC7 1AC8 1AC9 1ACA 1ACB
1ACC 1ACD 1ACE 1DF6 1DF7 1DF8 1DF9 1DFA A82C 10D24 10D25 10D26 10D27 10EAB 10EAC 10EFD 10EFE
10EFF 10F46 10F47 10F48 10F49 10F4A 10F4B 10F4C 10F4D 10F4E 10F4F 10F50 10F82 10F83 10F84 10F85
11070 1133B 1145E 11839 1183A 11938 1193D 1193E 11943 119E0 11A34 11A47 11A99 11D42 11D44 11D45
11D97 11F41 11F42 16FF0 16FF1 1E08F 1E130 1E131 1E132 1E133 1E134 1E135 1E136 1E2AE 1E2EC 1E2ED
1E2EE 1E2EF 1E4EC 1E4ED 1E4EE 1E4EF""".split()]

REGEX_NEWER_UNICODE_RANGES = """
180E 1C89-1C8A A7CB-A7CD A7DA-A7DC 105C0-105F3 10D40-10D65 10D6F-10D85 10EC2-10EC4 1123F-11240
11380-11389 1138B 1138E 11390-113B5 113B7 113D1 113D3 116D0-116E3 11BC0-11BE0 11BF0-11BF9 11F02
11F04-11F10 11F12-11F33 11F50-11F59 1342F 13441-13446 13460-143FA 16100-1611D 16130-16139
16D40-16D6C 16D70-16D79 18CFF 1B132 1B155 1CCF0-1CCF9 1D2C0-1D2D3 1DF25-1DF2A 1E030-1E06D
1E4D0-1E4EB 1E4F0-1E4F9 1E5D0-1E5ED 1E5F0-1E5FA 2B739 2EBF0-2EE5D 31350-323AF""".split()


def expand(ranges):
    out = set()
    for r in ranges:
        lo, _, hi = r.partition("-")
        out.update(range(int(lo, 16), int(hi or lo, 16) + 1))
    return out


REGEX_NEWER_UNICODE = expand(REGEX_NEWER_UNICODE_RANGES)
# Line breaks in Python's str.splitlines sense stay out of the line-per-probe texts.
LINE_BREAKS = {0x85, 0x2028, 0x2029}


def code_points():
    """Planes 0-3 and 14 (the others are unassigned or private use), surrogates excluded."""
    return [c for c in list(range(0x80, 0x40000)) + list(range(0xE0000, 0xE0200))
            if not 0xD800 <= c <= 0xDFFF and c not in LINE_BREAKS]


def byte_tokenizer(path):
    """NFC, then the 256 byte tokens of GPT-2's byte alphabet with id = byte; no merges."""
    visible = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    shift = 0
    alphabet = {}
    for b in range(256):
        if b in visible:
            alphabet[b] = chr(b)
        else:
            alphabet[b] = chr(256 + shift)
            shift += 1
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\n"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {alphabet[b]: b for b in range(256)}, "merges": []},
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    return path


def check_nfc(bin_dir, work, failures):
    probes, owners = [], []
    for c in code_points():
        ch = chr(c)
        for s in (ch, "a\u0301" + ch, ch + "\u0334", "e" + ch, unicodedata.normalize("NFD", ch)):
            probes.append(s)
            owners.append(c)
    text = "\n".join(probes) + "\n"
    ours = bytes(prepare_ids(bin_dir, work, "nfc", byte_tokenizer(os.path.join(work, "bytes.json")), text))
    ours_lines = ours.decode("utf-8").split("\n")
    theirs_lines = tokenizers.normalizers.NFC().normalize_str(text).split("\n")
    if not failures.check(len(ours_lines) == len(theirs_lines),
                          f"NFC: {len(ours_lines)} lines from zt-prepare, {len(theirs_lines)} from tokenizers"):
        return
    differ = sorted({o for o, a, b in zip(owners, ours_lines, theirs_lines) if a != b})
    listed = set(NFC_NEWER_UNICODE)
    extra = [f"U+{c:04X}" for c in differ if c not in listed]
    gone = [f"U+{c:04X}" for c in sorted(listed - set(differ))]
    failures.check(not extra, f"NFC differs from tokenizers at {len(extra)} unlisted code points: {extra[:20]}")
    failures.check(not gone, f"NFC equals tokenizers at {len(gone)} listed code points (update the list): {gone[:20]}")
    print(f"NFC: {len(probes)} probes of {len(set(owners))} code points; "
          f"{len(differ)} code points differ, all of them listed")


def check_regexes(bin_dir, src_dir, work, failures):
    skip = REGEX_NEWER_UNICODE | set(NFC_NEWER_UNICODE)
    text = "".join(f"a{chr(c)}b {chr(c)}1 {chr(c)}\n" for c in code_points() if c not in skip)
    cases = [("gpt2", os.path.join(src_dir, "tests", "data", "hf", "gpt2_tokenizer.json.gz"))]
    cases.append(("qwen2_5", os.path.join(shared_data_path(src_dir), "tokenizers", "qwen2_5", "tokenizer.json.gz")))
    for name, packed in cases:
        if not os.path.exists(packed):
            print(f"{name}: skipped: {packed} not found (ZT_SHARED_DATA names the shared data folder)")
            continue
        path = unzip(packed, os.path.join(work, name + ".json"))
        ours = prepare_ids(bin_dir, work, name, path, text)
        theirs = tokenizers.Tokenizer.from_file(path).encode(text, add_special_tokens=False).ids
        if ours == theirs:
            print(f"{name}: {len(theirs)} ids of {len(text.encode('utf-8'))} bytes (every code point but the "
                  f"{len(skip)} listed) equal tokenizers'")
            continue
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        failures.check(False, f"{name}: ids differ from tokenizers' first at id {at}: {ours[at:at + 3]} vs "
                              f"{theirs[at:at + 3]} ({len(ours)} vs {len(theirs)} ids)")


def main(bin_dir, src_dir):
    failures = Failures()
    with tempfile.TemporaryDirectory(prefix="zt-interop-") as work:
        check_nfc(bin_dir, work, failures)
        check_regexes(bin_dir, src_dir, work, failures)
    return failures.report(f"NFC and the pre-tokenizer regexes equal tokenizers {tokenizers.__version__} "
                           "on every code point but those listed")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
