#!/usr/bin/env python3
"""Builds multilingual.jsonl: real text from Debian packages, for the tokenizer exactness tests.

Translations: the msgstr strings of glib20.mo (package libglib2.0-data) and gtk20.mo (libgtk2.0-common)
for several scripts. Emoji: the sample lines of emoji-test.txt (package unicode-data 15.0.0-1, with
ZWJ sequences, skin tones, flags). Run on a Debian bookworm machine; the output is committed.
    python3 make_multilingual.py [/path/to/unicode-data-root] > multilingual.jsonl
"""
import json, os, struct, sys

LANGS = ["de", "fr", "es", "pl", "tr", "vi", "ru", "uk", "el", "ka", "hy", "ar", "he", "fa",
         "hi", "bn", "ta", "th", "am", "zh_CN", "zh_TW", "ja", "ko"]
PER_LANG = 6000  # bytes of text per language


def mo_strings(path):
    """msgstr values of a GNU .mo file, in file order."""
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    e = "<" if magic == 0x950412de else ">"
    n, _, trans_off = struct.unpack(e + "3I", data[8:20])
    for i in range(1, n):  # entry 0 is the header
        length, off = struct.unpack(e + "2I", data[trans_off + 8 * i: trans_off + 8 * i + 8])
        for s in data[off:off + length].split(b"\0"):
            yield s.decode("utf-8")


def main():
    out = sys.stdout
    for lang in LANGS:
        used = 0
        for mo in ("glib20.mo", "gtk20.mo"):
            path = f"/usr/share/locale/{lang}/LC_MESSAGES/{mo}"
            if not os.path.exists(path):
                continue
            for s in mo_strings(path):
                if used >= PER_LANG or not s.strip():
                    continue
                out.write(json.dumps({"source": f"{mo}:{lang}", "text": s}, ensure_ascii=False) + "\n")
                used += len(s.encode())
    root = sys.argv[1] if len(sys.argv) > 1 else "/"
    path = os.path.join(root, "usr/share/unicode/emoji/emoji-test.txt")
    lines = [l.rstrip("\n") for l in open(path, encoding="utf-8") if "; fully-qualified" in l]
    for l in lines[::6]:  # every sixth emoji keeps the file small but covers every group
        emoji, name = l.split("#", 1)[1].strip().split(" ", 1)
        out.write(json.dumps({"source": "emoji-test.txt", "text": f"{emoji} {name}"}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
