#!/usr/bin/env python3
"""Generates src/tokenizer/fold_tables.inc: the per-code-point fold of the Engram key normalizer as runs.

fold(c) = lowercase(strip marks (category M*)(NFD(NFKC(c)))), Python's unicodedata, per code point (the
tokenizers normalizer sequence NFKC, NFD, StripAccents, Lowercase of DeepSeek's engram.py). Hangul syllables
are left out: they decompose algorithmically in normalizer.cpp. A run covers lo..hi and is one of
  step 1/2, vary -1: lo, lo+step, ... fold to text (the code points in between fold to themselves);
  step 1/2, vary k:  the same, with code point k of text counting up by cp - lo;
  step 0 (a list):   text holds one code point per cp in lo..hi.
Prints an FNV-1a checksum of fold() over every code point, which tests/tokenizer/test_normalizer.cpp holds.
    python3 tools/gen/gen_fold_tables.py src/tokenizer/fold_tables.inc
"""
import sys
import unicodedata

HANGUL = range(0xAC00, 0xD7A4)
LIST_MIN_RUN = 3  # a pattern run folding fewer code points than this joins a list instead
LIST_MAX_GAP = 4  # identity code points a list may hold in a row
WIDTH = 108  # characters a line of the .inc


def fold(c):
    t = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", c))
    return "".join(ch for ch in t if not unicodedata.category(ch).startswith("M")).lower()


def code_points():
    return [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def checksum():
    """FNV-1a 64 over UTF-8(fold(c)) + 0xFF for every code point c, Hangul included."""
    h = 0xCBF29CE484222325
    for cp in code_points():
        for b in fold(chr(cp)).encode("utf-8") + b"\xff":
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def pattern_run(folded, cp):
    """The longest run (lo, hi, step, vary, text) starting at cp; its length counts folded code points."""
    text = folded[cp]
    best = (cp, cp, 1, -1, text, 1)
    for step in (1, 2):
        for vary in range(-1, len(text)):
            hi, n, count = cp, cp + step, 1
            while n in folded and all(n - k not in folded for k in range(1, step)):
                want = list(text)
                if vary >= 0:
                    want[vary] = chr(ord(want[vary]) + n - cp)
                if folded[n] != "".join(want):
                    break
                hi, n, count = n, n + step, count + 1
            if count > best[5]:
                best = (cp, hi, step, vary, text, count)
    return best


def runs(folded):
    out, cps, i = [], sorted(folded), 0
    while i < len(cps):
        cp = cps[i]
        lo, hi, step, vary, text, count = pattern_run(folded, cp)
        if count >= LIST_MIN_RUN or len(text) != 1:
            out.append((lo, hi, step, vary, text))
            while i < len(cps) and cps[i] <= hi:
                i += 1
            continue
        # a list: single code point folds (identity included) until a long run, a gap or a multi-char fold
        items, n = [], cp
        while True:
            f = folded.get(n, chr(n))
            if len(f) != 1 or (n in folded and n != cp and pattern_run(folded, n)[5] >= LIST_MIN_RUN):
                break
            if n not in folded and all(n + k not in folded for k in range(LIST_MAX_GAP + 1)):
                break
            items.append(f)
            n += 1
        while items and items[-1] == chr(cp + len(items) - 1):  # no identity tail
            items.pop()
        end = cp + len(items) - 1
        out.append((cp, end, 0, -1, "".join(items)) if len(items) > 1 else (cp, cp, 1, -1, items[0]))
        while i < len(cps) and cps[i] <= end:
            i += 1
    return out


def expand(rs):
    """What normalizer.cpp reads out of the runs, to check them against fold() here."""
    out = {}
    for lo, hi, step, vary, text in rs:
        for cp in range(lo, hi + 1, step or 1):
            if step == 0:
                out[cp] = text[cp - lo]
            elif vary < 0:
                out[cp] = text
            else:
                out[cp] = text[:vary] + chr(ord(text[vary]) + cp - lo) + text[vary + 1:]
    return {cp: f for cp, f in out.items() if f != chr(cp)}


def literal(text):
    """A C++ string literal of UTF-8 text: plain left-to-right characters as themselves, the rest escaped."""
    s = ""
    for ch in text:
        o = ord(ch)
        if ch in '"\\':
            s += "\\" + ch
        elif 0x20 <= o < 0x7F:
            s += ch
        elif o < 0xA0:
            s += "".join("\\%03o" % b for b in ch.encode("utf-8"))
        elif unicodedata.category(ch)[0] in "LNPS" and unicodedata.bidirectional(ch) in ("L", "EN", "ON"):
            s += ch
        else:
            s += "\\u%04X" % o if o < 0x10000 else "\\U%08X" % o
    return '"' + s + '"'


def columns(s):
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in s)


def main():
    folded = {}
    for cp in code_points():
        if cp not in HANGUL and fold(chr(cp)) != chr(cp):
            folded[cp] = fold(chr(cp))
    rs = runs(folded)
    assert expand(rs) == folded, "the runs do not reproduce the fold"
    lines = [f"// Generated by tools/gen/gen_fold_tables.py (unicodedata {unicodedata.unidata_version}); do not edit.",
             f"// {len(folded)} code points (Hangul syllables apart) in {len(rs)} runs: {{lo, hi, step, vary, text}}.",
             "static const FoldRun kFoldRuns[] = {"]
    line = ""
    for lo, hi, step, vary, text in rs:
        item = f"{{0x{lo:X},0x{hi:X},{step},{vary},{literal(text)}}},"
        if line and columns(line + item) > WIDTH:
            lines.append("  " + line)
            line = ""
        if columns(item) <= WIDTH:
            line += item
            continue
        # a long list: its text as adjacent literals, WIDTH characters a line
        lines.append(f"  {{0x{lo:X},0x{hi:X},{step},{vary},")
        chunks = [""]
        for ch in text:
            if columns(literal(chunks[-1] + ch)) > WIDTH - 2:
                chunks.append("")
            chunks[-1] += ch
        chunks = [literal(c) for c in chunks]
        lines += ["    " + c for c in chunks[:-1]]
        lines.append("    " + chunks[-1] + "},")
    lines.append("  " + line)
    lines.append("};")
    open(sys.argv[1], "w", encoding="utf-8").write("\n".join(lines) + "\n")
    print(f"{len(rs)} runs; checksum 0x{checksum():016X}")


if __name__ == "__main__":
    main()
