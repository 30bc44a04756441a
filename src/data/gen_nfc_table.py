"""Generates nfc_table.inc, the Unicode data of ztrain's NFC normalizer (nfc.cpp).

    python src/data/gen_nfc_table.py > src/data/nfc_table.inc

needs Hugging Face's `tokenizers` (tests/interop/requirements.txt) and Python's unicodedata.
The tables reproduce the NFC normalizer of `tokenizers` (what a tokenizer.json's
{"type": "NFC"} means), not the newest Unicode: `tokenizers` normalizes with data of an older
Unicode version (its crate unicode-normalization-alignments), so characters assigned since
then neither decompose, compose nor reorder there. Each table is therefore read off
`tokenizers` itself, with the values from unicodedata where `tokenizers` agrees they apply:
  - combining classes: unicodedata.combining(c) for the characters `tokenizers` reorders as
    non-starters (probed against U+0334, class 1, and U+0301, class 230);
  - decompositions: `tokenizers`' NFD of each character, fully decomposed (Hangul syllables
    are left to the algorithm in nfc.cpp);
  - compositions: the canonical pairs (unicodedata.decomposition) that `tokenizers`' NFC
    composes (excluded and non-primary composites are not).
Then a Python model of nfc.cpp's algorithm over these tables is checked against `tokenizers`
on every code point, every pair, Hangul and random strings of marks; the script fails on a
difference.
"""
import random
import sys
import unicodedata

import tokenizers.normalizers as normalizers

NFD = normalizers.NFD()
NFC = normalizers.NFC()
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def code_points():
    return (cp for cp in range(0x80, 0x110000) if not 0xD800 <= cp <= 0xDFFF)


def combining_classes():
    ccc = {}
    for cp in code_points():
        c = chr(cp)
        k = unicodedata.combining(c)
        if not k:
            continue
        probe = "a" + c + "\u0334" if k > 1 else "a\u0301" + c
        reordered = NFD.normalize_str(probe)[1] != probe[1]
        if reordered:
            ccc[cp] = k
    return ccc


def decompositions():
    table = {}
    for cp in code_points():
        if HANGUL_FIRST <= cp <= HANGUL_LAST:
            continue
        d = NFD.normalize_str(chr(cp))
        if d != chr(cp):
            table[cp] = [ord(x) for x in d]
    return table


def compositions(decomp):
    pairs = {}
    for cp in decomp:
        parts = unicodedata.decomposition(chr(cp)).split()
        if len(parts) != 2 or parts[0].startswith("<"):
            continue
        a, b = int(parts[0], 16), int(parts[1], 16)
        if NFC.normalize_str(chr(a) + chr(b)) == chr(cp):
            pairs[(a, b)] = cp
    return pairs


def model_nfc(text, ccc, decomp, pairs):
    """nfc.cpp's algorithm in Python."""
    out = []
    for ch in text:
        cp = ord(ch)
        if HANGUL_FIRST <= cp <= HANGUL_LAST:
            s = cp - HANGUL_FIRST
            parts = [0x1100 + s // 588, 0x1161 + (s % 588) // 28] + ([0x11A7 + s % 28] if s % 28 else [])
        else:
            parts = decomp.get(cp, [cp])
        for p in parts:
            k = ccc.get(p, 0)
            i = len(out)
            while k and i > 0 and ccc.get(out[i - 1], 0) > k:
                i -= 1
            out.insert(i, p)
    result, starter, last = [], -1, 0
    for cp in out:
        k = ccc.get(cp, 0)
        if starter >= 0 and (len(result) - 1 == starter or (last != 0 and last < k)):
            comp = compose(result[starter], cp, pairs)
            if comp is not None:
                result[starter] = comp
                continue
        if k == 0:
            starter = len(result)
        result.append(cp)
        last = k
    return "".join(map(chr, result))


def compose(a, b, pairs):
    if 0x1100 <= a < 0x1113 and 0x1161 <= b < 0x1176:
        return HANGUL_FIRST + ((a - 0x1100) * 21 + (b - 0x1161)) * 28
    if HANGUL_FIRST <= a <= HANGUL_LAST and (a - HANGUL_FIRST) % 28 == 0 and 0x11A8 <= b < 0x11C3:
        return a + (b - 0x11A7)
    return pairs.get((a, b))


def self_check(ccc, decomp, pairs):
    cases = [chr(cp) for cp in code_points()]
    cases += [chr(a) + chr(b) for (a, b) in pairs]
    rng = random.Random(1)
    marks = sorted(ccc) + [0x0301, 0x0316, 0x0334, 0x0345, 0x0F71, 0x0F72]
    starters = [0x41, 0x61, 0x65, 0x3B1, 0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01, 0x0B47, 0x0B3E, 0x0CC6, 0x0DD9]
    starters += [a for (a, _) in pairs][::7] + [b for (_, b) in pairs if not ccc.get(b)]
    for _ in range(200000):
        n = rng.randint(1, 6)
        cases.append("".join(chr(rng.choice(starters if rng.random() < 0.4 else marks)) for _ in range(n)))
    bad = [c for c in cases if model_nfc(c, ccc, decomp, pairs) != NFC.normalize_str(c)]
    for c in bad[:10]:
        print("differs:", [hex(ord(x)) for x in c], file=sys.stderr)
    return not bad


def ranges(ccc):
    """(lo, hi, class) runs of consecutive code points with the same class."""
    out = []
    for cp in sorted(ccc):
        if out and out[-1][1] == cp - 1 and out[-1][2] == ccc[cp]:
            out[-1][1] = cp
        else:
            out.append([cp, cp, ccc[cp]])
    return out


def emit(rows, per_line):
    lines = []
    for i in range(0, len(rows), per_line):
        lines.append("    " + " ".join(rows[i:i + per_line]))
    return "\n".join(lines)


def main():
    ccc = combining_classes()
    decomp = decompositions()
    pairs = compositions(decomp)
    if not self_check(ccc, decomp, pairs):
        sys.exit("gen_nfc_table.py: the tables do not reproduce tokenizers' NFC (see above)")
    pool, entries = [], []
    for cp in sorted(decomp):
        entries.append("{0x%05X, %d, %d}," % (cp, len(pool), len(decomp[cp])))
        pool.extend(decomp[cp])
    import tokenizers
    print("// Generated by src/data/gen_nfc_table.py from tokenizers %s and Python's unicodedata %s: do not edit."
          % (tokenizers.__version__, unicodedata.unidata_version))
    print("// %d combining-class runs, %d decompositions, %d compositions." % (len(ranges(ccc)), len(decomp), len(pairs)))
    print("\nconst CombiningRun kCombiningRuns[] = {")
    print(emit(["{0x%05X, 0x%05X, %d}," % tuple(r) for r in ranges(ccc)], 3))
    print("};\n\nconst Decomposition kDecompositions[] = {")
    print(emit(entries, 4))
    print("};\n\nconst uint32_t kDecompositionPool[] = {")
    print(emit(["0x%05X," % cp for cp in pool], 8))
    print("};\n\nconst Composition kCompositions[] = {")
    print(emit(["{0x%05X, 0x%05X, 0x%05X}," % (a, b, pairs[(a, b)]) for (a, b) in sorted(pairs)], 3))
    print("};")


if __name__ == "__main__":
    main()
