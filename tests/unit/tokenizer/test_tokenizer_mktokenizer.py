#!/usr/bin/python3
"""mmgw-mktokenizer writes a tokenizer.json shaped like M3's that both our tokenizer and the independent
Python reference read the same way: structure (NFC, Split + ByteLevel, ByteLevel decoder), contiguous
added-token ids in the file (so HF keeps them), M3's markers at M3's offsets, and then the differential
encode/decode test on it. usage: test_tokenizer_mktokenizer.py MKTOKENIZER TOK_CLI"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    mk, cli = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "tokenizer.json")
        p = subprocess.run([mk, "--out", out, "--merges", "300"], capture_output=True, text=True, timeout=120)
        print(p.stdout.strip(), p.stderr.strip())
        if p.returncode != 0:
            sys.exit(1)
        t = json.load(open(out, encoding="utf-8"))
        bad = []
        if t["normalizer"] != {"type": "NFC"}:
            bad.append("normalizer")
        pts = t["pre_tokenizer"]["pretokenizers"]
        if [x["type"] for x in pts] != ["Split", "ByteLevel"] or pts[0]["behavior"] != "Isolated":
            bad.append("pre_tokenizer")
        if t["decoder"]["type"] != "ByteLevel" or t["model"]["type"] != "BPE":
            bad.append("decoder/model")
        vocab, merges, added = t["model"]["vocab"], t["model"]["merges"], t["added_tokens"]
        if len(merges) != 300 or len(vocab) != 256 + 300:
            bad.append(f"sizes: {len(vocab)} vocab, {len(merges)} merges")
        if sorted(vocab.values()) != list(range(len(vocab))):
            bad.append("vocab ids not 0..n-1")
        ids = [a["id"] for a in added]
        if ids != list(range(len(vocab), len(vocab) + 64)):
            bad.append("added ids not contiguous after the vocab")
        by = {a["content"]: a for a in added}
        base = len(vocab)
        for content, off in [("]!p~[", 0), ("]~b]", 19), ("[e~[", 20), ("]<]image[>[", 25), ("]<]video[>[", 26),
                             ("]<]start of image[>[", 29), ("]<]end of image[>[", 30), ("]~!b[", 34),
                             ("<tool_call>", 52), ("]<]minimax[>[", 58), ("<mm:think>", 59), ("</mm:think>", 60)]:
            if content not in by or by[content]["id"] != base + off:
                bad.append(f"{content} not at base+{off}")
        if by.get("[e~[", {}).get("special") is not True or by.get("<mm:think>", {}).get("special") is not False:
            bad.append("special flags")
        if bad:
            print("FAIL:", bad)
            sys.exit(1)
        r = subprocess.run([sys.executable, os.path.join(HERE, "test_tokenizer_diff.py"), cli, out, "1500"])
        sys.exit(r.returncode)


if __name__ == "__main__":
    main()
