#!/usr/bin/python3
"""OpenAI API benchmark: mmgw with the API module in front of a fast C worker, against baselines measured in
the same run, loopback only.

  /usr/bin/python3 bench/api/bench_api.py [--build build] [--threads 1] [--requests 20000] [--clients 32]
                                          [--streams 4] [--rounds 3] [--idle 2000]

1. Text-only chats (non-streaming, 8 new tokens) with h2load over h2c and HTTP/1.1, alternating round by round
   with nginx serving a static JSON response (bench/http's baseline): requests/s, and mmgw/nginx.
2. Added latency: one client, one request at a time, max_tokens 2: mean latency of a chat through the gateway
   minus the same Generate (prompt length, 2 tokens, repeated so the worker's prefix cache hits as it does for
   the chats) sent through the gateway's own gRPC client alone (bench-api-upstream).
   Also the CPU time per chat of the gateway process and of the worker process during the h2c runs.
3. Images per second end to end (chat with a 640x480 JPEG as a data: URL, max_tokens 1, preprocess_threads 2),
   against the preprocessing alone on the same image with 2 threads (mmgw-preprocess, in-process pool).
4. Memory per idle connection of the gateway with the API module loaded (HTTP/1.1 and h2), and nginx's.

The worker is bench-api-fast-worker: the real worker service (gRPC, scheduler, continuous batching) over the
scheduler tests' fake engine, so the numbers are the gateway's, not a model's.
"""
import argparse
import base64
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "http"))
import bench_http as bh  # noqa: E402  (nginx baseline, h2load parsing, idle-connection memory)


def cpu_s(pid):
    """User + system CPU seconds of a process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(argv, log, env=None):
    return subprocess.Popen(argv, stdout=log, stderr=log, env=env)


def wait_file(path, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and open(path).read().strip():
            return int(open(path).read().strip())
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"{path} never appeared")


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Gateway:
    name = "mmgw"

    def __init__(self, build, threads, tok, worker_addr, tmp, pp_threads=2):
        self.port = bh.free_port()
        self.port_h1 = self.port
        conf = os.path.join(tmp, "mmgw-api.conf")
        with open(conf, "w") as f:
            f.write(f"http {{\n listen 127.0.0.1:{self.port};\n worker_threads {threads};\n access_log off;\n"
                    f" log_level warn;\n max_connections 100000;\n}}\n"
                    f"model demo {{\n plugin m3;\n tokenizer {tok};\n upstream {worker_addr};\n"
                    f" preprocess_threads {pp_threads};\n}}\n")
        self.log = open(os.path.join(tmp, "mmgw.log"), "a")
        self.proc = start([os.path.join(build, "bin", "mmgw"), "-c", conf], self.log)
        if not bh.wait_port(self.port):
            raise RuntimeError("mmgw did not start")
        time.sleep(0.3)  # first health check

    def pids(self):
        return [self.proc.pid]

    def stop(self):
        stop(self.proc)
        self.log.close()


def h2load_post(url, body_file, n, c, m, h1=False, threads=1):
    cmd = ["h2load", "-n", str(n), "-c", str(c), "-m", str(1 if h1 else m), "-t", str(threads), "-d", body_file,
           "-H", "content-type: application/json"]
    if h1:
        cmd.append("--h1")
    cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900).stdout
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    status = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    lat = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", out)

    def ms(t):
        mm = re.match(r"([\d.]+)(us|ms|s)", t or "")
        return float(mm.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[mm.group(2)] if mm else float("nan")

    return {"rps": float(rps.group(1)) if rps else 0.0, "2xx": int(status.group(1)) if status else 0,
            "errors": sum(int(status.group(i)) for i in (2, 3, 4)) if status else -1,
            "lat_mean": ms(lat.group(3)) if lat else float("nan")}


def jpeg_640x480():
    from PIL import Image
    im = Image.new("RGB", (640, 480))
    px = im.load()
    for y in range(480):
        for x in range(640):
            px[x, y] = ((x * 7 + y) % 256, (y * 3) % 256, (x ^ y) % 256)
    b = io.BytesIO()
    im.save(b, "JPEG", quality=85)
    return b.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    ap.add_argument("--threads", type=int, default=1, help="gateway event loops / nginx workers")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--streams", type=int, default=4, help="concurrent streams per h2 connection")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--images", type=int, default=300)
    args = ap.parse_args()
    b = args.build
    need = [os.path.join(b, "bin", x) for x in ("mmgw", "mmgw-mktokenizer", "mmgw-preprocess", "bench-api-fast-worker",
                                                 "bench-api-upstream")]
    for p in need + [shutil.which("h2load"), shutil.which("nginx") or "/usr/sbin/nginx"]:
        if not p or not os.path.exists(p):
            print(f"missing: {p} (build the targets mmgw mmgw-mktokenizer mmgw-preprocess bench-api-fast-worker "
                  f"bench-api-upstream)")
            return 77
    tmp = tempfile.mkdtemp(prefix="mmgw-bench-api-")
    log = open(os.path.join(tmp, "procs.log"), "w")
    tok = os.path.join(tmp, "tokenizer.json")
    subprocess.run([os.path.join(b, "bin", "mmgw-mktokenizer"), "--out", tok], check=True, capture_output=True)
    t = json.load(open(tok))
    ids = {a["content"]: a["id"] for a in t["added_tokens"]}
    env = dict(os.environ, FAKE_VOCAB=str(max(ids.values()) + 1), FAKE_IMAGE=str(ids["]<]image[>["]),
               FAKE_VIDEO=str(ids["]<]video[>["]), FAKE_EOS=str(ids["<|mmgw_reserved_63|>"]), MMGW_LOG_LEVEL="warn")
    wlog = log

    def start_worker():
        """A fresh worker per measurement: the fake engine's page bookkeeping grows with every request."""
        pf = os.path.join(tmp, "wport")
        if os.path.exists(pf):
            os.unlink(pf)
        w = start([os.path.join(b, "bin", "bench-api-fast-worker"), "--model", tmp, "--listen", "127.0.0.1:0",
                   "--port-file", pf, "--threads", "1", "--cache-pages", "4096"], wlog, env)
        return w, f"127.0.0.1:{wait_file(pf, w)}"

    chat = os.path.join(tmp, "chat.json")
    with open(chat, "w") as f:
        json.dump({"model": "demo", "messages": [{"role": "user", "content": "Say something short about the sea."}],
                   "max_tokens": 8, "ignore_eos": True}, f)
    chat1 = os.path.join(tmp, "chat1.json")
    with open(chat1, "w") as f:
        json.dump({"model": "demo", "messages": [{"role": "user", "content": "Say something short about the sea."}],
                   "max_tokens": 1, "ignore_eos": True}, f)
    one = os.path.join(tmp, "one.json")
    with open(one, "w") as f:
        json.dump({"model": "demo", "messages": [{"role": "user", "content": "Say something short about the sea."}],
                   "max_tokens": 2, "ignore_eos": True}, f)
    jpg = jpeg_640x480()
    img = os.path.join(tmp, "img.json")
    with open(img, "w") as f:
        json.dump({"model": "demo", "max_tokens": 1, "ignore_eos": True, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(jpg).decode()}}]}]},
            f)
    jpg_path = os.path.join(tmp, "img.jpg")
    open(jpg_path, "wb").write(jpg)
    res = {"nginx": [], "mmgw": [], "mmgw1": []}
    try:
        # 1. requests/s, alternating with nginx
        for rnd in range(args.rounds):
            ng = bh.Nginx(args.threads, tmp)
            try:
                bh.h2load(f"http://127.0.0.1:{ng.port}/health",
                          argparse.Namespace(requests=5000, clients=args.clients, streams=args.streams, load_threads=1))
                na = argparse.Namespace(requests=args.requests * 5, clients=args.clients, streams=args.streams,
                                        load_threads=1)
                n2 = bh.h2load(f"http://127.0.0.1:{ng.port}/health", na)
                n1 = bh.h2load(f"http://127.0.0.1:{ng.port_h1}/health", na, h1=True)
                m1 = bh.idle_memory(ng, args.idle, h2=False) if rnd == 0 else None
                m2 = bh.idle_memory(ng, args.idle, h2=True) if rnd == 0 else None
                res["nginx"].append((n2, n1, m1, m2))
            finally:
                ng.stop()
            meas = {}
            for label, body_file in (("chat8", chat), ("chat1", chat1)):
                worker, waddr = start_worker()
                gw = Gateway(b, args.threads, tok, waddr, tmp)
                try:
                    url = f"http://127.0.0.1:{gw.port}/v1/chat/completions"
                    h2load_post(url, body_file, 2000, args.clients, args.streams)
                    c0 = (cpu_s(gw.proc.pid), cpu_s(worker.pid))
                    g2 = h2load_post(url, body_file, args.requests, args.clients, args.streams)
                    c1 = (cpu_s(gw.proc.pid), cpu_s(worker.pid))
                    g1 = h2load_post(url, body_file, args.requests, args.clients, 1, h1=True)
                    m1 = bh.idle_memory(gw, args.idle, h2=False) if rnd == 0 and label == "chat8" else None
                    m2 = bh.idle_memory(gw, args.idle, h2=True) if rnd == 0 and label == "chat8" else None
                    meas[label] = (g2, g1, m1, m2, (c1[0] - c0[0]) / args.requests, (c1[1] - c0[1]) / args.requests)
                finally:
                    gw.stop()
                    stop(worker)
            res["mmgw"].append(meas["chat8"])
            res["mmgw1"].append(meas["chat1"])
            print(f"round {rnd + 1}: nginx h2c {n2['rps']:.0f} h1 {n1['rps']:.0f} req/s; mmgw chat(8) h2c "
                  f"{meas['chat8'][0]['rps']:.0f} h1 {meas['chat8'][1]['rps']:.0f}; chat(1) h2c {meas['chat1'][0]['rps']:.0f} "
                  f"h1 {meas['chat1'][1]['rps']:.0f} req/s (errors "
                  f"{sum(meas[k][i]['errors'] for k in meas for i in (0, 1))})", flush=True)
        # 2. added latency: gateway vs the worker alone, one request at a time
        worker, waddr = start_worker()
        gw = Gateway(b, args.threads, tok, waddr, tmp)
        try:
            url = f"http://127.0.0.1:{gw.port}/v1/chat/completions"
            n_prompt = json.loads(subprocess.run(
                ["curl", "-s", "-d", json.dumps({"model": "demo", "messages": json.load(open(one))["messages"]}),
                 f"http://127.0.0.1:{gw.port}/tokenize"], capture_output=True, text=True).stdout)["count"]
            h2load_post(url, one, 500, 1, 1, h1=True)
            lat_gw = h2load_post(url, one, 3000, 1, 1, h1=True)["lat_mean"]
            out = subprocess.run([os.path.join(b, "bin", "bench-api-upstream"), "--target", waddr, "--prompt",
                                  str(n_prompt), "--gen", "2", "--requests", "3000"], capture_output=True, text=True,
                                 timeout=300).stdout.split()
            lat_w = float(out[0])
            # 3. images per second end to end, 2 preprocessing threads
            h2load_post(url, img, 40, 4, 1, h1=True)
            r_img = h2load_post(url, img, args.images, 8, 1, h1=True)
        finally:
            gw.stop()
            stop(worker)
        pp = subprocess.run([os.path.join(b, "bin", "mmgw-preprocess"), "--plugin", "m3", "--threads", "2",
                             "--dtype", "bf16", "--repeat", str(args.images), "--image", jpg_path, "--out",
                             os.path.join(tmp, "pp.safetensors")], capture_output=True, text=True)
        m = re.search(r"throughput: ([\d.]+) items/s", pp.stderr)
        pp_rate = float(m.group(1)) if m else float("nan")
        if not m:
            print("mmgw-preprocess:", pp.stderr.strip()[-300:])
    finally:
        log.close()

    med = lambda xs: sorted(xs)[len(xs) // 2]
    print(f"\nthreads={args.threads}; h2load -c {args.clients} -m {args.streams} (h2) / -m 1 (h1), "
          f"{args.requests} chats per measurement (nginx: 5x as many), {args.rounds} alternating rounds, medians\n")
    print("| server | request | h2c req/s | h2c mean latency | HTTP/1.1 req/s | HTTP/1.1 mean latency "
          "| idle conn HTTP/1.1 (kB) | idle conn h2 (kB) |")
    print("|---|---|---|---|---|---|---|---|")
    fmt = lambda v: f"{v:.2f}" if v is not None else "-"
    for name, what in (("nginx", "static JSON (15 B)"), ("mmgw", "chat, 8 new tokens"), ("mmgw1", "chat, 1 new token")):
        rs = res[name]
        print(f"| {'nginx 1.22' if name == 'nginx' else 'mmgw'} | {what} | {med([r[0]['rps'] for r in rs]):.0f} | {med([r[0]['lat_mean'] for r in rs]):.2f} ms "
              f"| {med([r[1]['rps'] for r in rs]):.0f} | {med([r[1]['lat_mean'] for r in rs]):.2f} ms "
              f"| {fmt(rs[0][2])} | {fmt(rs[0][3])} |")
    for key, what in (("mmgw", "8 new tokens"), ("mmgw1", "1 new token")):
        r2 = med([m[0]["rps"] / max(n[0]["rps"], 1) for n, m in zip(res["nginx"], res[key])])
        r1 = med([m[1]["rps"] / max(n[1]["rps"], 1) for n, m in zip(res["nginx"], res[key])])
        cg = med([m[4] for m in res[key]]) * 1e6
        cw = med([m[5] for m in res[key]]) * 1e6
        print(f"chat ({what}) / nginx static, median of per-round ratios: h2c {r2:.3f}x, HTTP/1.1 {r1:.3f}x "
              f"(target >= 0.3x); CPU per chat: gateway {cg:.0f} us, worker {cw:.0f} us")
    print(f"added latency (one request at a time, max_tokens 2, {n_prompt}-token prompt): gateway {lat_gw:.3f} ms "
          f"- worker alone {lat_w:.3f} ms = {lat_gw - lat_w:.3f} ms")
    print(f"images end to end (640x480 JPEG data: URL, 2 preprocessing threads, 8 clients): {r_img['rps']:.1f} "
          f"images/s ({r_img['2xx']} ok, {r_img['errors']} errors); preprocessing alone, 2 threads: {pp_rate:.1f} images/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
