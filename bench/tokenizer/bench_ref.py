#!/usr/bin/python3
"""Baseline for bench/tokenizer: the pure-Python reference tokenizer (ref_tokenizer.py: python3-regex for
the split, a dict-based BPE with a word cache, unicodedata NFC) on the same corpus with the same request
chunking as bench_tokenizer.c. HF tokenizers itself cannot be installed here (PyPI is unreachable and
Debian 12 has no python3-tokenizers). usage: bench_ref.py TOKENIZER.json CORPUS.txt [max_bytes]"""
import sys
import time

import ref_tokenizer


def chunks(text):
    pos, n = 0, len(text)
    while pos < n:
        end = min(pos + 4096, n)
        while end < n and text[end] != 0x0A:
            end += 1
        yield text[pos:end]
        pos = end


def main():
    t0 = time.perf_counter()
    tok = ref_tokenizer.Tokenizer(sys.argv[1])
    t_load = time.perf_counter() - t0
    data = open(sys.argv[2], "rb").read()
    if len(sys.argv) > 3:
        data = data[: int(sys.argv[3])]
    data = data.decode("utf-8", "ignore").encode("utf-8")
    pieces = [c.decode("utf-8") for c in chunks(data)]
    t0, c0 = time.perf_counter(), time.process_time()
    ids = []
    for p in pieces:
        ids += tok.encode(p)
    t_enc, c_enc = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    text = tok.decode(ids)
    t_dec = time.perf_counter() - t0
    h = 0xCBF29CE484222325
    for i in ids:
        h = ((h ^ i) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    print(f"ref_load_ms {t_load * 1e3:.1f}")
    print(f"ref_corpus_bytes {len(data)}")
    print(f"ref_tokens {len(ids)}")
    print(f"ref_ids_fnv {h:016x}")
    print(f"ref_encode_MBps {len(data) / t_enc / 1e6:.2f}")
    print(f"ref_encode_cpu_MBps {len(data) / c_enc / 1e6:.2f}")
    print(f"ref_decode_MBps {len(text.encode()) / t_dec / 1e6:.2f}")
    print("ref_roundtrip", "ok" if text.encode() == data else "MISMATCH")


if __name__ == "__main__":
    main()
