#!/usr/bin/python3
"""Summarise rounds.sh output: per case and thread count, the median over rounds of us/token before and
after (min-max in brackets), then bench-runtime's decode tok/s per round."""
import re
import statistics as st
import sys

txt = open(sys.argv[1]).read()
cases = ["c1 first, ctx 32", "c16, ctx 32", "c1 after c16, ctx 32", "c1, ctx 512", "c16, ctx 512"]
res, loads = {}, []
for b in re.split(r"^== ", txt, flags=re.M):
    m = re.match(r"round (\d+) (\w+) threads (\d) load ([\d.]+)", b)
    if not m:
        continue
    _, v, t, load = m.groups()
    loads.append(float(load))
    us = [float(x) for x in re.findall(r"\(([\d.]+) us/token\)", b)]
    for k, u in zip(cases, us):
        res.setdefault((k, t, v), []).append(u)
if loads:
    print(f"load average {min(loads)}-{max(loads)}\n")
print("| case | threads | before | after |\n|---|---:|---:|---:|")
for k in [cases[0], cases[2], cases[1], cases[3], cases[4]]:
    for t in "12":
        b, a = res.get((k, t, "before"), []), res.get((k, t, "after"), [])
        if b and a:
            print(f"| {k} | {t} | {st.median(b):.1f} ({min(b):.0f}-{max(b):.0f}) "
                  f"| {st.median(a):.1f} ({min(a):.0f}-{max(a):.0f}) |")
br = {}
for b in re.split(r"^== bench-runtime ", txt, flags=re.M)[1:]:
    _, v, t = re.match(r"round (\d+) (\w+) threads (\d)", b).groups()
    for n, _, dec, one in re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", b, flags=re.M):
        br.setdefault((t, int(n), v), []).append((dec, one))
if br:
    print("\n| threads | sequences | batched, before | batched, after | one at a time, before | one at a time, after |")
    print("|---:|---:|---:|---:|---:|---:|")
    for t in "12":
        for n in (1, 4, 16):
            b, a = br.get((t, n, "before"), []), br.get((t, n, "after"), [])
            print(f"| {t} | {n} | {' / '.join(x[0] for x in b)} | {' / '.join(x[0] for x in a)} "
                  f"| {' / '.join(x[1] for x in b)} | {' / '.join(x[1] for x in a)} |")
