#!/usr/bin/python3
"""Worker throughput through gRPC against the same work done offline by mmgw-run, in one run.

For each concurrency C in --streams (default 1 4 16 64):
  mmgw-run: --eval on C cases (prompt --prompt tokens, --gen greedy tokens each; mmgw-run batches all cases in
           one step): wall-clock tokens/s (process start and model load included), and its CPU time per decode
           token from two runs, generating --gen tokens and generating 1 (load, prompt and mmgw-run's extra
           outputs cancel out in the difference).
  engine:  bench-worker-offline --mode engine: a plain batched wk_engine_forward loop, same shape of work.
  sched:   bench-worker-offline --mode sched: the worker's scheduler in-process (no gRPC).
  gRPC:    mmgw-worker on the same checkpoint, C concurrent Generate streams of fresh prompts of the same shape
           (greedy, ignore_eos), all started together, from bench-worker-client (C, gRPC core: the gateway's
           kind of client) and from python3-grpcio: generated tokens / wall time, decode tokens/s (tokens
           after each stream's first / time after the first first-token), and time to first token (p50 /
           p90 / max over the C streams).
Then time to first token of a probe request (--prompt tokens, 1 new) while 16 streams are decoding.

CPU time per generated token (the worker process's user + system time over a run / tokens; for the offline
baselines their own process's) is the overhead measure that a shared, loaded machine distorts least.
Every number is the median of --reps runs. Loopback only. Usage:
  /usr/bin/python3 bench/worker/bench_worker.py [--build build] [--model DIR] [--threads 2]
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration", "worker"))
import wk_client as wc  # noqa: E402


def prompts(n, length, vocab, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.integers(10, min(vocab, 8000) - 10, size=length).astype(np.int32) for _ in range(n)]


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def offline(args, ps, gen, tmp):
    """(wall seconds, CPU seconds) mmgw-run takes for these prompts with `gen` greedy tokens each (medians)."""
    path = os.path.join(tmp, "eval_%d_%d.safetensors" % (len(ps), gen))
    t = {}
    for i, p in enumerate(ps):
        t["c%03d/ids" % i] = p
        t["c%03d/greedy" % i] = np.zeros(gen, dtype=np.int32)
    wc.write_safetensors(path, t)
    out = os.path.join(tmp, "out.safetensors")
    exe = os.path.join(args.build, "bin", "mmgw-run")
    times, cpus = [], []
    for _ in range(args.reps):
        t0, c0 = time.perf_counter(), children_cpu_s()
        subprocess.run([exe, "--model", args.model, "--eval", path, "--out", out, "--threads", str(args.threads),
                        "--chunk", str(args.step_tokens)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
        cpus.append(children_cpu_s() - c0)
    return statistics.median(times), statistics.median(cpus)


def grpc_run(stub, pb2, ps, gen, tag):
    reqs = [wc.make_request(pb2, "%s-%d-%d" % (tag, i, time.time_ns()), p, max_new=gen) for i, p in enumerate(ps)]
    t0 = time.perf_counter()
    res = wc.run_threads([lambda r=r: wc.generate(stub, r) for r in reqs])
    wall = time.perf_counter() - t0
    for r in res:
        if r.code.name != "OK" or len(r.tokens.get(0, [])) != gen:
            raise RuntimeError("stream failed: %s %s" % (r.code, r.details))
    ttft = sorted(r.first_token_s for r in res)
    # decode rate: the tokens after each stream's first, over the span from the first first-token to the end
    first = min(r.t0 + r.first_token_s for r in res)
    last = max(r.t_end for r in res)
    dec = len(ps) * (gen - 1) / (last - first) if last > first else float("nan")
    return {"wall": wall, "tok_s": len(ps) * gen / wall, "dec_s": dec, "ttft50": ttft[len(ttft) // 2],
            "ttft90": ttft[min(len(ttft) - 1, int(0.9 * len(ttft)))], "ttftmax": ttft[-1]}


def offline_bin(args, mode, c):
    exe = os.path.join(args.build, "bin", "bench-worker-offline")
    out = subprocess.run([exe, "--model", args.model, "--mode", mode, "--streams", str(c), "--prompt", str(args.prompt),
                          "--gen", str(args.gen), "--threads", str(args.threads), "--step-tokens",
                          str(args.step_tokens), "--reps", str(args.reps)], check=True, capture_output=True,
                         text=True).stdout.split()
    return float(out[2]), float(out[3]), float(out[4])


def proc_cpu_s(pid):
    """CPU seconds (user + system, every thread) of a process so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def c_client(args, w, c, rep, vocab):
    exe = os.path.join(args.build, "bin", "bench-worker-client")
    port = w.port
    c0 = proc_cpu_s(w.proc.pid)
    out = subprocess.run([exe, "--port", str(port), "--streams", str(c), "--prompt", str(args.prompt), "--gen",
                          str(args.gen), "--vocab", str(vocab), "--seed", str(7000 + 100 * rep + c)], check=True,
                         capture_output=True, text=True).stdout.split()
    cpu_us = (proc_cpu_s(w.proc.pid) - c0) / (c * args.gen) * 1e6
    return {"tok_s": float(out[1]), "dec_s": float(out[2]), "ttft50": float(out[3]) / 1e3,
            "ttft90": float(out[4]) / 1e3, "ttftmax": float(out[5]) / 1e3, "cpu_us": cpu_us}


def med(rows, k):
    return statistics.median(r[k] for r in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, nargs="*", default=[1, 4, 16, 64])
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--step-tokens", type=int, default=2048)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mmgw-bench-worker-")
    if not args.model:
        td = os.environ.get("MMGW_TESTDATA", os.path.join(SRC, "..", "shared", "testdata"))
        gm = os.path.join(td, "m3-tiny-a")
        if os.path.exists(os.path.join(gm, "config.json")):
            args.model = gm
        else:
            args.model = os.path.join(tmp, "demo")
            subprocess.run([os.path.join(args.build, "bin", "mmgw-mkdemo"), "--out", args.model], check=True)
    pb2, _ = wc.gen_stubs()
    w = wc.WorkerProc([os.path.join(args.build, "bin", "mmgw-worker"), "--model", args.model, "--threads",
                       str(args.threads), "--step-tokens", str(args.step_tokens)]).wait_ready()
    vocab = w.stub.ModelInfo(pb2.ModelInfoRequest()).vocab_size
    try:
        grpc_run(w.stub, pb2, prompts(4, args.prompt, vocab, 99), 8, "warm")
        print("model %s, %d threads, prompt %d, %d new tokens per stream, median of %d\n" %
              (os.path.basename(args.model.rstrip("/")), args.threads, args.prompt, args.gen, args.reps))
        print("tok/s = generated tokens per second over all streams: total (prefill included) / decode only\n")
        print("| streams | mmgw-run total tok/s | engine loop total / decode | scheduler in-process total / decode |"
              " gRPC, C client: total / decode | gRPC / engine (decode) | TTFT p50 / p90 / max ms (C client) |"
              " gRPC, Python client: total / decode | CPU µs per token: mmgw-run decode / engine / scheduler /"
              " gRPC worker |")
        print("|---|---|---|---|---|---|---|---|---|")
        for c in args.streams:
            ps0 = prompts(c, args.prompt, vocab, c)
            t_full, cpu_full = offline(args, ps0, args.gen, tmp)
            t_one, cpu_one = offline(args, ps0, 1, tmp)
            run_total = c * args.gen / t_full
            run_dec_cpu = (cpu_full - cpu_one) / (c * (args.gen - 1)) * 1e6
            eng = offline_bin(args, "engine", c)
            sch = offline_bin(args, "sched", c)
            # fresh prompts per repetition, so that no run reuses another's prefix pages
            crows = [c_client(args, w, c, r, vocab) for r in range(args.reps)]
            prows = [grpc_run(w.stub, pb2, prompts(c, args.prompt, vocab, 1000 * (r + 1) + c), args.gen, "b%d" % c)
                     for r in range(args.reps)]
            print("| %d | %.0f | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %.2f | %.1f / %.1f / %.1f |"
                  " %.0f / %.0f | %.0f / %.0f / %.0f / %.0f |" % (
                      c, run_total, eng[0], eng[1], sch[0], sch[1], med(crows, "tok_s"), med(crows, "dec_s"),
                      med(crows, "dec_s") / eng[1], 1e3 * med(crows, "ttft50"), 1e3 * med(crows, "ttft90"),
                      1e3 * med(crows, "ttftmax"), med(prows, "tok_s"), med(prows, "dec_s"), run_dec_cpu, eng[2],
                      sch[2], med(crows, "cpu_us")), flush=True)

        # a probe's time to first token while 16 streams decode
        probes, idle = [], []
        for rep in range(args.reps):
            p = prompts(1, args.prompt, vocab, 500 + rep)
            idle.append(grpc_run(w.stub, pb2, p, 1, "idle%d" % rep)["ttft50"])
            bg = prompts(16, args.prompt, vocab, 600 + rep)
            started = threading.Event()
            reqs = [wc.make_request(pb2, "bg%d-%d" % (rep, i), q, max_new=4 * args.gen) for i, q in enumerate(bg)]
            ths = [threading.Thread(target=wc.generate, args=(w.stub, r), kwargs={"on_chunk": lambda _r: started.set()})
                   for r in reqs]
            for t in ths:
                t.start()
            started.wait(60)
            time.sleep(0.2)
            probes.append(grpc_run(w.stub, pb2, p, 1, "probe%d" % rep)["ttft50"])
            for t in ths:
                t.join()
        print("\nTTFT of a %d-token prompt: idle %.1f ms, while 16 streams decode %.1f ms (median of %d)" %
              (args.prompt, 1e3 * statistics.median(idle), 1e3 * statistics.median(probes), args.reps))
    finally:
        w.stop()


if __name__ == "__main__":
    main()
