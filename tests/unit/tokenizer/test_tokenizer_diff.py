#!/usr/bin/python3
"""Differential test: the C tokenizer (through tok_cli) against the independent Python reference
(bench/tokenizer/ref_tokenizer.py, itself checked against HF's goldens first) on thousands of seeded
random strings built from the hard cases: contractions in every case, digit runs, whitespace of every
kind (CR/LF runs, NEL, NBSP, U+2000, U+3000), combining marks in and out of canonical order, Hangul
jamo, CJK, emoji with ZWJ and modifiers, control characters, special tokens and near-misses glued to
text. Decoding is compared on random id sequences (with and without skip_special).

usage: test_tokenizer_diff.py TOK_CLI TOKENIZER.json [N]   (exit 77 when python3-regex is missing)"""
import json
import os
import random
import subprocess
import sys

try:
    import regex  # noqa: F401  (needed by the reference)
except ImportError:
    print("SKIP: python3-regex is not installed (the reference tokenizer needs it)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench", "tokenizer"))
import ref_tokenizer  # noqa: E402

WS = [" ", "  ", "   ", "\t", "\n", "\r", "\r\n", "\n\n", "\r\n\r\n", " \n", "\u00a0", "\u0085", "\u2000",
      "\u3000", "\u000b", "\u000c", "\u202f", "\u180e", "\u200b", " \t \n"]
MARKS = ["\u0301", "\u0300", "\u0308", "\u0323", "\u0327", "\u030a", "\u0342", "\u0345", "\u093c", "\u05b7"]
PIECES = ["'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'D", "'\u017f", "'", "''",
          "e\u0301", "\u00e9", "A\u030a", "\u212b", "\u1100\u1161\u11a8", "\uac00\u11a8", "\ud55c\uad6d\uc5b4",
          "\u4e2d\u6587", "\u65e5\u672c\u8a9e\u306e", "\u30ab\u30bf\u30ab\u30ca", "\u304b\u3099",
          "\U0001f680", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f1ef\U0001f1f5",
          "\u00bd", "\u2460", "\u0663\u0664", "\uff21\uff22", "\ufb01", "\U0001d53e", "\u0645\u0631\u062d\u0628\u0627",
          "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a",
          "\x00", "\x01", "\x7f", "\ufeff", "\ufffd", "\u2028", "\u2029", "\u00ad", "x\u0323\u0302", "q\u0307\u0323",
          "...", "!!", "?!", "--", "==>", "->", "\u2192", "\u00ab\u00bb", "$", "#", "@", "/", "\\", "\"", "`",
          "http://a.b/c?d=e&f", "x**2", "a_b", "CamelCase", "snake_case", "ALLCAPS", "\u0130", "\u0131", "\u00df"]


def rand_word(r):
    n = r.randint(1, 12)
    w = "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    k = r.random()
    return w.upper() if k < 0.1 else w.capitalize() if k < 0.3 else w


def rand_text(r, specials):
    parts = []
    for _ in range(r.randint(1, 14)):
        k = r.random()
        if k < 0.25:
            parts.append(rand_word(r))
        elif k < 0.4:
            parts.append(r.choice(WS))
        elif k < 0.5:
            parts.append("".join(r.choice("0123456789") for _ in range(r.randint(1, 7))))
        elif k < 0.58:
            parts.append(r.choice(MARKS) * r.randint(1, 3))
        elif k < 0.66 and specials:
            s = r.choice(specials)
            parts.append(s if r.random() < 0.7 else s[: r.randint(1, max(1, len(s) - 1))])
        elif k < 0.72:
            # a random assigned-looking code point from the BMP or the SMP, never a surrogate
            cp = r.choice([r.randint(0x20, 0x2FF), r.randint(0x370, 0x2FFF), r.randint(0x3000, 0xD7FF),
                           r.randint(0xE000, 0xFFFD), r.randint(0x10000, 0x1FAFF)])
            parts.append(chr(cp))
        else:
            parts.append(r.choice(PIECES))
    return "".join(parts)


def run_cli(cli, tok_path, mode, flag, lines):
    p = subprocess.run([cli, tok_path, mode, str(flag)], input="\n".join(lines) + "\n", capture_output=True,
                       text=True, timeout=300)
    if p.returncode != 0:
        print("tok_cli failed:", p.stderr)
        sys.exit(1)
    return [json.loads(x) for x in p.stdout.splitlines()]


def main():
    cli, tok_path = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
    if not os.path.exists(tok_path):
        print(f"SKIP: {tok_path} not found (golden data absent: a plain clone has none)")
        sys.exit(77)
    ref = ref_tokenizer.Tokenizer(tok_path)
    specials = list(ref.added.keys())
    r = random.Random(20261130)
    texts = [rand_text(r, specials) for _ in range(n)]
    texts += ["", " ", "a" * 5000, " " * 3000 + "x", "\r\n" * 500, "1" * 2000, "\U0001f600" * 300,
              "e" + "\u0301" * 200, ("word " * 2000).strip()]
    bad = 0
    got = run_cli(cli, tok_path, "encode", 0, [json.dumps(t) for t in texts])
    for t, g in zip(texts, got):
        want = ref.encode(t)
        if g != want:
            bad += 1
            if bad <= 10:
                print("ENCODE MISMATCH", json.dumps(t)[:200])
                print("   c  :", g if isinstance(g, dict) else g[:60])
                print("   ref:", want[:60])
        elif ref.decode(g) != ref.normalize(t) and not any(a.get("lstrip") or a.get("rstrip")
                                                           for a in ref.added.values()):
            bad += 1
            if bad <= 10:
                print("ROUNDTRIP MISMATCH", json.dumps(t)[:200])
    print(f"encode: {len(texts)} strings, {bad} mismatches")

    # decoding random id sequences: partial UTF-8 across tokens, specials, unknown ids
    vocab_size = max(max(ref.id2tok), max(ref.added_by_id or [0])) + 1
    seqs = []
    for _ in range(n):
        seq = [r.randrange(vocab_size + 5) for _ in range(r.randint(0, 12))]
        seqs.append(seq)
    dbad = 0
    for skip in (0, 1):
        got = run_cli(cli, tok_path, "decode", skip, [json.dumps(s) for s in seqs])
        for s, g in zip(seqs, got):
            want = ref.decode(s, skip_special=bool(skip))
            if g != want:
                dbad += 1
                if dbad <= 10:
                    print("DECODE MISMATCH", s, repr(g), repr(want))
    print(f"decode: {2 * len(seqs)} sequences, {dbad} mismatches")
    sys.exit(1 if bad or dbad else 0)


if __name__ == "__main__":
    main()
