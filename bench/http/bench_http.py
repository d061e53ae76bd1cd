#!/usr/bin/python3
"""HTTP server-core benchmark: mmgw against nginx, same machine, same run, loopback only.

  /usr/bin/python3 bench/http/bench_http.py [--build build] [--threads 1] [--requests 200000]
                                             [--clients 64] [--streams 10] [--idle 2000]
                                             [--path /health] [--data FILE] [--mmgw-conf FILE]

For each server: h2load over cleartext HTTP/2 (prior knowledge) and over HTTP/1.1 (h2load --h1) against a fixed
JSON response (mmgw: the built-in GET /health; nginx: `return 200` of the same bytes), then the memory of N idle
connections (RSS delta of the server processes) for HTTP/1.1 and HTTP/2. Prints a markdown table.

To benchmark another route later (the full chat path with a toy worker), pass --path/--data and --mmgw-conf with
the models; nginx keeps serving its static JSON as the baseline.
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
from loopback import free_port, rss_kb  # noqa: E402,F401  (bench_api.py uses free_port through this module)
STATIC_JSON = '{"status":"ok"}'


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def wait_port(port, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Mmgw:
    name = "mmgw"

    def __init__(self, build, threads, conf_file, tmp):
        self.port = free_port()
        self.port_h1 = self.port  # one port speaks both
        conf = os.path.join(tmp, "mmgw.conf")
        extra = open(conf_file).read() if conf_file else ""
        with open(conf, "w") as f:
            f.write(f"http {{\n listen 127.0.0.1:{self.port};\n worker_threads {threads};\n access_log off;\n"
                    f" log_level warn;\n max_connections 100000;\n}}\n{extra}")
        self.log = open(os.path.join(tmp, "mmgw.log"), "w")
        self.proc = subprocess.Popen([os.path.join(build, "bin", "mmgw"), "-c", conf], stdout=self.log,
                                     stderr=self.log)
        if not wait_port(self.port):
            raise RuntimeError("mmgw did not start")

    def pids(self):
        return [self.proc.pid]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(20)
        self.log.close()


class Nginx:
    name = "nginx"

    def __init__(self, threads, tmp, cpus=None):
        """cpus: a taskset CPU list for nginx (its workers inherit it), or None."""
        self.port = free_port()
        self.port_h1 = free_port()
        self.prefix = os.path.join(tmp, "nginx")
        os.makedirs(os.path.join(self.prefix, "logs"), exist_ok=True)
        with open(os.path.join(HERE, "nginx.conf.in")) as f:
            conf = f.read()
        conf = conf.replace("@WORKERS@", str(threads)).replace("@PORT@", str(self.port)).replace("@PORT_H1@", str(self.port_h1)) \
                   .replace("@PREFIX@", self.prefix).replace("@BODY@", STATIC_JSON)
        path = os.path.join(self.prefix, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        argv = [nginx, "-p", self.prefix, "-c", path]
        if cpus:
            argv = ["taskset", "-c", cpus] + argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_port(self.port) or not wait_port(self.port_h1):
            raise RuntimeError("nginx did not start")

    def pids(self):
        return [self.proc.pid] + children(self.proc.pid)

    def stop(self):
        self.proc.send_signal(signal.SIGQUIT)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def h2load(url, args, h1=False, data=None):
    cmd = ["h2load", "-n", str(args.requests), "-c", str(args.clients), "-m", str(1 if h1 else args.streams),
           "-t", str(args.load_threads)]
    if h1:
        cmd.append("--h1")
    if data:
        cmd += ["-d", data]
    cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    ok = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed", out)
    lat = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", out)
    status = re.search(r"status codes: (\d+) 2xx", out)
    def ms(t):
        m = re.match(r"([\d.]+)(us|ms|s)", t or "")
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)] if m else float("nan")

    return {
        "rps": float(rps.group(1)) if rps else 0.0,
        "ok": int(ok.group(1)) if ok else 0,
        "failed": int(ok.group(2)) if ok else -1,
        "2xx": int(status.group(1)) if status else 0,
        "lat_mean": ms(lat.group(3)) if lat else float("nan"),
        "lat_max": ms(lat.group(2)) if lat else float("nan"),
    }


def idle_memory(server, n, h2):
    """RSS delta (kB per connection) after opening n idle connections (HTTP/2: preface + SETTINGS sent)."""
    time.sleep(0.3)
    before = rss_kb(*server.pids())
    socks = []
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", server.port if h2 else server.port_h1))
        if h2:
            s.sendall(preface)
        socks.append(s)
    time.sleep(1.0)  # let the server accept and set up every connection
    after = rss_kb(*server.pids())
    for s in socks:
        s.close()
    return (after - before) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    ap.add_argument("--threads", type=int, default=1, help="server threads / nginx workers")
    ap.add_argument("--load-threads", type=int, default=1, help="h2load threads")
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--streams", type=int, default=10, help="concurrent streams per HTTP/2 connection")
    ap.add_argument("--idle", type=int, default=2000, help="idle connections for the memory test")
    ap.add_argument("--path", default="/health")
    ap.add_argument("--data", help="POST this file (h2load -d)")
    ap.add_argument("--mmgw-conf", help="extra config appended after the http block (models, media)")
    ap.add_argument("--rounds", type=int, default=3, help="alternate the servers this many times; medians reported")
    args = ap.parse_args()
    for tool in ("h2load", "nginx"):
        if not shutil.which(tool) and not os.path.exists("/usr/sbin/" + tool):
            print(f"{tool} is not installed")
            return 77
    tmp = tempfile.mkdtemp(prefix="mmgw-bench-")
    results = {"nginx": [], "mmgw": []}
    try:
        # servers alternate round by round, so load from elsewhere on a shared machine hits both alike
        for rnd in range(args.rounds):
            for make in (lambda: Nginx(args.threads, tmp),
                         lambda: Mmgw(args.build, args.threads, args.mmgw_conf, tmp)):
                srv = make()
                try:
                    path = args.path if srv.name == "mmgw" else "/health"
                    data = args.data if srv.name == "mmgw" else None
                    url = f"http://127.0.0.1:{srv.port}{path}"
                    url1 = f"http://127.0.0.1:{srv.port_h1}{path}"
                    h2load(url, argparse.Namespace(**{**vars(args), "requests": 20000}))  # warm-up
                    r2 = h2load(url, args, data=data)
                    r1 = h2load(url1, args, h1=True, data=data)
                    m1 = idle_memory(srv, args.idle, h2=False) if rnd == 0 else None
                    m2 = idle_memory(srv, args.idle, h2=True) if rnd == 0 else None
                    results[srv.name].append((r2, r1, m1, m2))
                    print(f"round {rnd + 1} {srv.name}: h2c {r2['rps']:.0f} req/s, HTTP/1.1 {r1['rps']:.0f} req/s",
                          flush=True)
                finally:
                    srv.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2]

    print(f"\nthreads={args.threads} h2load: -n {args.requests} -c {args.clients} -m {args.streams} (h2), "
          f"-m 1 (h1), -t {args.load_threads}; {args.rounds} alternating rounds, medians; "
          f"idle connections: {args.idle}\n")
    print("| server | h2c req/s | h2c mean latency | HTTP/1.1 req/s | HTTP/1.1 mean latency "
          "| idle conn HTTP/1.1 (kB) | idle conn h2 (kB) | failed |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for name in ("nginx", "mmgw"):
        rs = results[name]
        h2r = med([r[0]["rps"] for r in rs])
        h1r = med([r[1]["rps"] for r in rs])
        h2l = med([r[0]["lat_mean"] for r in rs])
        h1l = med([r[1]["lat_mean"] for r in rs])
        failed = sum(r[0]["failed"] + r[1]["failed"] for r in rs)
        summary[name] = (h2r, h1r)
        print(f"| {name} | {h2r:.0f} | {h2l:.2f} ms | {h1r:.0f} | {h1l:.2f} ms | {rs[0][2]:.2f} | {rs[0][3]:.2f} | {failed} |")
    ratios2 = [m[0]["rps"] / max(n[0]["rps"], 1) for n, m in zip(results["nginx"], results["mmgw"])]
    ratios1 = [m[1]["rps"] / max(n[1]["rps"], 1) for n, m in zip(results["nginx"], results["mmgw"])]
    print(f"\nmmgw / nginx (median of per-round ratios): h2c {med(ratios2):.2f}x, HTTP/1.1 {med(ratios1):.2f}x "
          f"(target >= 0.3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
