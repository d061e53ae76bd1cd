#!/usr/bin/python3
"""OpenAI API benchmark: mmgw with the API module in front of a fast C worker, against baselines measured in
the same run, loopback only.

  /usr/bin/python3 bench/api/bench_api.py [--build build] [--threads 1,2] [--requests 20000] [--clients 32]
                                          [--h1-clients 32] [--streams 4] [--rounds 3] [--pin] [--idle 2000]
                                          [--images 300] [--chats 1,8] [--before OTHER_BUILD]

1. Text-only chats (non-streaming, ignore_eos, 1 and 8 new tokens) with h2load over h2c and HTTP/1.1,
   alternating round by round with nginx serving a static JSON response (bench/http's baseline): requests/s
   and mmgw/nginx, for each server thread count in --threads (nginx worker_processes = mmgw worker_threads).
   In the same rounds the gateway also runs with MMGW_UPSTREAM_TRANSPORT=grpc-core (every Generate through
   gRPC C core, the transport before the per-loop connections): the before/after of this work.
   CPU time per request of every process is read from /proc: nginx (master + workers), the gateway, the
   worker and h2load, for h2c and HTTP/1.1 alike, so the comparison can also be made per core of server CPU,
   and the worker's share of the CPU the chats cost is visible.
   --before OTHER_BUILD: that build's mmgw (e.g. the last commit's) runs in the same rounds too, with the same
   worker binary: before/after from one run.
   --pin: the server (nginx, or the gateway) on CPU 0, the worker and h2load on CPU 1.
2. Added latency: one client, one request at a time, max_tokens 2: mean latency of a chat through the gateway
   minus the same Generate (prompt length, 2 tokens, repeated so the worker's prefix cache hits as it does for
   the chats) sent through the gateway's own client alone, on an event loop as the gateway sends it
   (bench-api-upstream).
3. Images per second end to end (chat with a 640x480 JPEG as a data: URL, max_tokens 1, preprocess_threads 2),
   against the preprocessing alone on the same image with 2 threads (mmgw-preprocess, in-process pool).
4. Memory per idle connection of the gateway with the API module loaded (HTTP/1.1 and h2), and nginx's.

The worker is bench-api-fast-worker: the real worker service (gRPC, scheduler, continuous batching) over a model
that costs nothing (bench_engine.c), so the numbers are the gateway's and the serving stack's, not a model's.
"""
import argparse
import base64
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "http"))
import bench_http as bh  # noqa: E402  (nginx baseline, h2load parsing, idle-connection memory)


def cpu_s(pids):
    """User + system CPU seconds of processes (all their threads); gone ones count 0."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def pinned(argv, cpus):
    return (["taskset", "-c", cpus] + argv) if cpus else argv


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

    def __init__(self, build, threads, tok, worker_addr, tmp, pp_threads=2, transport=None, cpus=None):
        # build: a build folder with bin/mmgw and plugins/m3.so (the plugin is found next to the binary)
        self.port = bh.free_port()
        self.port_h1 = self.port
        conf = os.path.join(tmp, "mmgw-api.conf")
        with open(conf, "w") as f:
            f.write(f"http {{\n listen 127.0.0.1:{self.port};\n worker_threads {threads};\n access_log off;\n"
                    f" log_level warn;\n max_connections 100000;\n}}\n"
                    f"model demo {{\n plugin m3;\n tokenizer {tok};\n upstream {worker_addr};\n"
                    f" preprocess_threads {pp_threads};\n}}\n")
        self.log = open(os.path.join(tmp, "mmgw.log"), "a")
        env = dict(os.environ)
        if transport:
            env["MMGW_UPSTREAM_TRANSPORT"] = transport
        self.proc = start(pinned([os.path.join(build, "bin", "mmgw"), "-c", conf], cpus), self.log, env)
        if not bh.wait_port(self.port):
            raise RuntimeError("mmgw did not start")
        time.sleep(0.3)  # first health check

    def pids(self):
        return [self.proc.pid]

    def stop(self):
        stop(self.proc)
        self.log.close()


def ms(t):
    mm = re.match(r"([\d.]+)(us|ms|s)", t or "")
    return float(mm.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[mm.group(2)] if mm else float("nan")


def h2load(url, n, c, m, h1=False, body=None, cpus=None):
    """One h2load run: req/s, errors, mean latency and h2load's own CPU seconds."""
    cmd = ["h2load", "-n", str(n), "-c", str(c), "-m", str(1 if h1 else m), "-t", "1"]
    if body:
        cmd += ["-d", body, "-H", "content-type: application/json"]
    if h1:
        cmd.append("--h1")
    cmd.append(url)
    t0 = os.times()
    out = subprocess.run(pinned(cmd, cpus), capture_output=True, text=True, timeout=900).stdout
    t1 = os.times()
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    status = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    lat = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", out)
    return {"rps": float(rps.group(1)) if rps else 0.0, "2xx": int(status.group(1)) if status else 0,
            "errors": (n - int(status.group(1))) if status else n,
            "lat_mean": ms(lat.group(3)) if lat else float("nan"),
            "h2load_cpu": (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)}


def measure(url, n, c, m, h1, body, server_pids, worker_pids, cpus_load):
    """h2load plus the CPU seconds per request of the server, the worker and h2load over the run."""
    s0, w0 = cpu_s(server_pids), cpu_s(worker_pids)
    r = h2load(url, n, c, m, h1=h1, body=body, cpus=cpus_load)
    r["server_us"] = (cpu_s(server_pids) - s0) / n * 1e6
    r["worker_us"] = (cpu_s(worker_pids) - w0) / n * 1e6
    r["load_us"] = r["h2load_cpu"] / n * 1e6
    return r


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


def med(xs):
    xs = sorted(x for x in xs if x == x)
    return xs[len(xs) // 2] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    ap.add_argument("--threads", default="1,2", help="server threads to compare (gateway loops = nginx workers)")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--h1-clients", type=int, default=0, help="HTTP/1.1 connections (default: --clients)")
    ap.add_argument("--chats", default="1,8", help="new tokens per chat to measure (1, 8)")
    ap.add_argument("--before", default="", help="another build folder whose mmgw runs in the same rounds")
    ap.add_argument("--streams", type=int, default=4, help="concurrent streams per h2 connection")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pin", action="store_true", help="server on CPU 0; worker and h2load on CPU 1 (1 thread)")
    ap.add_argument("--no-core-baseline", action="store_true", help="skip the gRPC C core transport runs")
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="requests/s only (no latency, images, idle memory)")
    args = ap.parse_args()
    b = args.build
    need = [os.path.join(b, "bin", x) for x in ("mmgw", "mmgw-mktokenizer", "mmgw-preprocess", "bench-api-fast-worker",
                                                 "bench-api-upstream")]
    for p in need + [shutil.which("h2load"), shutil.which("nginx") or "/usr/sbin/nginx"]:
        if not p or not os.path.exists(p):
            print(f"missing: {p} (build the targets mmgw mmgw-mktokenizer mmgw-preprocess bench-api-fast-worker "
                  f"bench-api-upstream)")
            return 77
    if args.pin and not shutil.which("taskset"):
        print("--pin needs taskset")
        return 77
    threads_list = [int(t) for t in args.threads.split(",")]
    h1c = args.h1_clients or args.clients
    labels = [f"chat{n}" for n in args.chats.split(",")]
    if args.before and not os.path.exists(os.path.join(args.before, "bin", "mmgw")):
        print(f"missing: {args.before}/bin/mmgw")
        return 77
    tmp = tempfile.mkdtemp(prefix="mmgw-bench-api-")
    log = open(os.path.join(tmp, "procs.log"), "w")
    tok = os.path.join(tmp, "tokenizer.json")
    subprocess.run([os.path.join(b, "bin", "mmgw-mktokenizer"), "--out", tok], check=True, capture_output=True)
    t = json.load(open(tok))
    ids = {a["content"]: a["id"] for a in t["added_tokens"]}
    env = dict(os.environ, FAKE_VOCAB=str(max(ids.values()) + 1), FAKE_IMAGE=str(ids["]<]image[>["]),
               FAKE_VIDEO=str(ids["]<]video[>["]), FAKE_EOS=str(ids["<|mmgw_reserved_63|>"]), MMGW_LOG_LEVEL="warn")

    def start_worker(cpus=None):
        """A fresh worker per measurement, so that every one starts from an empty prefix cache."""
        pf = os.path.join(tmp, "wport")
        if os.path.exists(pf):
            os.unlink(pf)
        w = start(pinned([os.path.join(b, "bin", "bench-api-fast-worker"), "--model", tmp, "--listen", "127.0.0.1:0",
                          "--port-file", pf, "--threads", "1", "--cache-pages", "4096"], cpus), log, env)
        return w, f"127.0.0.1:{wait_file(pf, w)}"

    bodies = {}
    for label, n_tok in (("chat1", 1), ("chat8", 8), ("one", 2)):
        path = os.path.join(tmp, f"{label}.json")
        with open(path, "w") as f:
            json.dump({"model": "demo", "messages": [{"role": "user", "content": "Say something short about the sea."}],
                       "max_tokens": n_tok, "ignore_eos": True}, f)
        bodies[label] = path
    jpg = jpeg_640x480() if not args.quick else b""
    img = os.path.join(tmp, "img.json")
    with open(img, "w") as f:
        json.dump({"model": "demo", "max_tokens": 1, "ignore_eos": True, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(jpg).decode()}}]}]},
            f)
    jpg_path = os.path.join(tmp, "img.jpg")
    open(jpg_path, "wb").write(jpg)

    # variants of the gateway measured in every round: (name, build folder, MMGW_UPSTREAM_TRANSPORT)
    transports = [("loop", b, None)] + ([] if args.no_core_baseline else [("grpc-core", b, "grpc-core")]) + \
        ([("before", args.before, None)] if args.before else [])
    # res[threads][key] = list over rounds of (h2c result, h1 result)
    res = {th: {} for th in threads_list}
    idle = {}
    loads = []
    try:
        # 1. requests/s, alternating with nginx
        for rnd in range(args.rounds):
            for th in threads_list:
                pin = args.pin and th == 1
                cpu_srv, cpu_other = ("0", "1") if pin else (None, None)
                n_nginx = args.requests * 5
                ng = bh.Nginx(th, tmp, cpus=cpu_srv)
                try:
                    url = f"http://127.0.0.1:{ng.port}/health"
                    h2load(url, 5000, args.clients, args.streams, cpus=cpu_other)
                    n2 = measure(url, n_nginx, args.clients, args.streams, False, None, ng.pids(), [], cpu_other)
                    n1 = measure(f"http://127.0.0.1:{ng.port_h1}/health", n_nginx, h1c, 1, True, None,
                                 ng.pids(), [], cpu_other)
                    if rnd == 0 and th == threads_list[0] and not args.quick:
                        idle["nginx"] = (bh.idle_memory(ng, args.idle, h2=False), bh.idle_memory(ng, args.idle, h2=True))
                    res[th].setdefault("nginx", []).append((n2, n1))
                finally:
                    ng.stop()
                line = [f"round {rnd + 1} threads {th}{' pinned' if pin else ''}: nginx h2c {n2['rps']:.0f} "
                        f"h1 {n1['rps']:.0f}"]
                for label in labels:
                    for tname, tbuild, tenv in transports:
                        worker, waddr = start_worker(cpu_other)
                        gw = Gateway(tbuild, th, tok, waddr, tmp, transport=tenv, cpus=cpu_srv)
                        try:
                            url = f"http://127.0.0.1:{gw.port}/v1/chat/completions"
                            h2load(url, 2000, args.clients, args.streams, body=bodies[label], cpus=cpu_other)
                            g2 = measure(url, args.requests, args.clients, args.streams, False, bodies[label],
                                         gw.pids(), [worker.pid], cpu_other)
                            g1 = measure(url, args.requests, h1c, 1, True, bodies[label], gw.pids(),
                                         [worker.pid], cpu_other)
                            if (rnd == 0 and th == threads_list[0] and label == labels[-1] and tname == "loop"
                                    and not args.quick):
                                idle["mmgw"] = (bh.idle_memory(gw, args.idle, h2=False),
                                                bh.idle_memory(gw, args.idle, h2=True))
                            res[th].setdefault(f"{label}/{tname}", []).append((g2, g1))
                        finally:
                            gw.stop()
                            stop(worker)
                        line.append(f"{label} {tname} h2c {g2['rps']:.0f} h1 {g1['rps']:.0f} (err {g2['errors'] + g1['errors']})")
                loads.append(os.getloadavg()[0])
                print("; ".join(line) + f"; load {loads[-1]:.1f}", flush=True)
        lat_gw = lat_w = float("nan")
        r_img = {"rps": float("nan"), "2xx": 0, "errors": 0, "server_us": float("nan"), "worker_us": float("nan")}
        pp_rate = float("nan")
        n_prompt = 0
        if not args.quick:
            # 2. added latency: gateway vs the worker alone, one request at a time
            worker, waddr = start_worker()
            gw = Gateway(b, 1, tok, waddr, tmp)
            try:
                url = f"http://127.0.0.1:{gw.port}/v1/chat/completions"
                n_prompt = json.loads(subprocess.run(
                    ["curl", "-s", "-d", json.dumps({"model": "demo", "messages": json.load(open(bodies["one"]))["messages"]}),
                     f"http://127.0.0.1:{gw.port}/tokenize"], capture_output=True, text=True).stdout)["count"]
                h2load(url, 500, 1, 1, h1=True, body=bodies["one"])
                lat_gw = h2load(url, 3000, 1, 1, h1=True, body=bodies["one"])["lat_mean"]
                out = subprocess.run([os.path.join(b, "bin", "bench-api-upstream"), "--target", waddr, "--prompt",
                                      str(n_prompt), "--gen", "2", "--requests", "3000", "--transport", "loop"],
                                     capture_output=True, text=True, timeout=300).stdout.split()
                lat_w = float(out[0])
                # 3. images per second end to end, 2 preprocessing threads
                h2load(url, 40, 4, 1, h1=True, body=img)
                r_img = measure(url, args.images, 8, 1, True, img, gw.pids(), [worker.pid], None)
            finally:
                gw.stop()
                stop(worker)
            pp = subprocess.run([os.path.join(b, "bin", "mmgw-preprocess"), "--plugin", "m3", "--threads", "2",
                                 "--dtype", "bf16", "--repeat", str(args.images), "--image", jpg_path, "--out",
                                 os.path.join(tmp, "pp.safetensors")], capture_output=True, text=True)
            m = re.search(r"throughput: ([\d.]+) items/s", pp.stderr)
            pp_rate = float(m.group(1)) if m else float("nan")
    finally:
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nh2load -c {args.clients} -m {args.streams} (h2c) / --h1 -c {h1c} (HTTP/1.1), -t 1; {args.requests} chats per "
          f"measurement (nginx: 5x as many); {args.rounds} alternating rounds, medians; load average during the "
          f"rounds {min(loads):.1f}-{max(loads):.1f}; {'pinned: server on CPU 0, worker and h2load on CPU 1 (1 thread)' if args.pin else 'unpinned'}\n")
    print("| threads | server | request | transport | h2c req/s | h2c mean latency | HTTP/1.1 req/s | "
          "HTTP/1.1 mean latency | server CPU/req h2c / h1 | worker CPU/req h2c / h1 | h2load CPU/req h2c / h1 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    what = {"chat1": "chat, 1 new token", "chat8": "chat, 8 new tokens"}
    for th in threads_list:
        r = res[th]
        for key in ["nginx"] + [f"{l}/{tn}" for l in labels for tn, _, _ in transports]:
            rs = r[key]
            name, req, tr = ("nginx 1.22", "static JSON (15 B)", "-") if key == "nginx" else \
                ("mmgw", what[key.split("/")[0]], key.split("/")[1])
            def us(k):
                return f"{med([x[0][k] for x in rs]):.1f} / {med([x[1][k] for x in rs]):.1f} us"
            print(f"| {th} | {name} | {req} | {tr} | {med([x[0]['rps'] for x in rs]):.0f} | "
                  f"{med([x[0]['lat_mean'] for x in rs]):.2f} ms | {med([x[1]['rps'] for x in rs]):.0f} | "
                  f"{med([x[1]['lat_mean'] for x in rs]):.2f} ms | {us('server_us')} | "
                  f"{'-' if key == 'nginx' else us('worker_us')} | {us('load_us')} |")
    print()
    for th in threads_list:
        r = res[th]
        for key in [f"{l}/{tn}" for l in labels for tn, _, _ in transports]:
            r2 = med([m[0]["rps"] / max(n[0]["rps"], 1) for n, m in zip(r["nginx"], r[key])])
            r1 = med([m[1]["rps"] / max(n[1]["rps"], 1) for n, m in zip(r["nginx"], r[key])])
            # per core of server CPU: requests each could serve per CPU-second, gateway vs nginx
            pc = med([n[0]["server_us"] / max(m[0]["server_us"], 1e-9) for n, m in zip(r["nginx"], r[key])])
            pc1 = med([n[1]["server_us"] / max(m[1]["server_us"], 1e-9) for n, m in zip(r["nginx"], r[key])])
            # the worker's share of all CPU a chat cost (gateway + worker + h2load)
            ws = [m[1]["worker_us"] / max(m[1]["server_us"] + m[1]["worker_us"] + m[1]["load_us"], 1e-9)
                  for m in r[key]]
            print(f"threads {th}, {key}: mmgw/nginx req/s (median of per-round ratios) h2c {r2:.3f}x, HTTP/1.1 "
                  f"{r1:.3f}x (target >= 0.3x); per core of server CPU h2c {pc:.3f}x, HTTP/1.1 {pc1:.3f}x; "
                  f"worker's share of the chat CPU (HTTP/1.1) {100 * med(ws):.0f}%")
    if not args.quick:
        print(f"\nadded latency (one request at a time, max_tokens 2, {n_prompt}-token prompt): gateway {lat_gw:.3f} ms "
              f"- worker alone {lat_w:.3f} ms = {lat_gw - lat_w:.3f} ms")
        print(f"images end to end (640x480 JPEG data: URL, 2 preprocessing threads, 8 clients): {r_img['rps']:.1f} "
              f"images/s ({r_img['2xx']} ok, {r_img['errors']} errors; CPU per image: gateway "
              f"{r_img['server_us'] / 1e3:.2f} ms, worker {r_img['worker_us'] / 1e3:.2f} ms); preprocessing alone, "
              f"2 threads: {pp_rate:.1f} images/s")
        if idle:
            print(f"idle connection memory (kB, HTTP/1.1 / h2): nginx {idle['nginx'][0]:.2f} / {idle['nginx'][1]:.2f}, "
                  f"mmgw {idle['mmgw'][0]:.2f} / {idle['mmgw'][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
