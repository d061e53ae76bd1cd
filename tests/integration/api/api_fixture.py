"""Process fixtures for the API integration tests: workers (the real mmgw-worker, the Python toy worker),
the gateway, a loopback media server, and HTTP clients (urllib for HTTP/1.1, curl for h2c and TLS h2).

Every address is loopback and every wait is bounded. Processes are stopped by their own pid."""
import base64
import http.client
import http.server
import json
import os
import re
import signal
import struct
import array
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from loopback import free_port, make_cert, rss_kb  # noqa: E402,F401  (test_api.py uses them through fx)

BUILD = os.environ.get("MMGW_BUILD", os.path.join(os.path.dirname(__file__), "../../../build"))
SOURCE = os.environ.get("MMGW_SOURCE", os.path.join(os.path.dirname(__file__), "../../.."))
TESTDATA = os.environ.get("MMGW_TESTDATA", os.path.join(SOURCE, "..", "shared", "testdata"))
MMGW = os.path.join(BUILD, "bin", "mmgw")
WORKER = os.path.join(BUILD, "bin", "mmgw-worker")
MKDEMO = os.path.join(BUILD, "bin", "mmgw-mkdemo")
MKTOK = os.path.join(BUILD, "bin", "mmgw-mktokenizer")
TOY = os.path.join(SOURCE, "tests", "toy_worker", "toy_worker.py")
PY = "/usr/bin/python3"

FAILURES = []
PROCS = []  # everything we started, stopped at exit


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return cond


def skip(why):
    print("SKIP:", why, flush=True)
    stop_all()
    sys.exit(77)


def need_file(path, what):
    if not os.path.exists(path):
        skip(f"{what} not found at {path}")


def need_testdata():
    if not os.path.isdir(os.path.join(TESTDATA, "m3-tiny-a")):
        skip(f"golden test data not found (MMGW_TESTDATA={TESTDATA}); a plain clone runs api_demo instead")


def finish():
    stop_all()
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("PASS")
    sys.exit(0)


def stop_all():
    for p in reversed(PROCS):
        p.stop()


# ---------------------------------------------------------------- processes

class Proc:
    check_exit = False  # the gateway must exit 0 with a clean log (sanitizer builds report there)

    def __init__(self, argv, name, cwd=None, env=None):
        self.dir = tempfile.mkdtemp(prefix=f"mmgw-api-{name}-")
        self.name = name
        self.log_path = os.path.join(self.dir, "log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, cwd=cwd or self.dir, env=env)
        PROCS.append(self)

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()
        if self.check_exit:
            txt = self.text()
            check(self.proc.returncode == 0, f"{self.name} exited with {self.proc.returncode}")
            check("Sanitizer" not in txt and "runtime error:" not in txt, f"{self.name}: sanitizer report in its log")
        if FAILURES and self.proc.returncode not in (None,):
            print(f"---- {self.name} log (tail) ----\n" + self.text()[-4000:])
        if self in PROCS:
            PROCS.remove(self)

    def rss_kb(self):
        return rss_kb(self.proc.pid)


def wait_port_file(path, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                s = f.read().strip()
            if s:
                return int(s)
        if not proc.alive():
            break
        time.sleep(0.05)
    raise RuntimeError(f"{proc.name} did not start:\n{proc.text()[-3000:]}")


class RealWorker(Proc):
    def __init__(self, model_dir, extra=()):
        need_file(WORKER, "mmgw-worker")
        d = tempfile.mkdtemp(prefix="mmgw-api-wport-")
        pf = os.path.join(d, "port")
        super().__init__([WORKER, "--model", model_dir, "--listen", "127.0.0.1:0", "--port-file", pf, "--threads", "2",
                          *extra], "worker")
        self.port = wait_port_file(pf, self)
        self.addr = f"127.0.0.1:{self.port}"


class ToyWorker(Proc):
    def __init__(self, *extra):
        d = tempfile.mkdtemp(prefix="mmgw-api-tport-")
        pf = os.path.join(d, "port")
        super().__init__([PY, TOY, "--listen", "127.0.0.1:0", "--port-file", pf, *extra], "toy")
        self.port = wait_port_file(pf, self)
        self.addr = f"127.0.0.1:{self.port}"


def grpc_stubs():
    """worker_pb2, worker_pb2_grpc generated from the repo's proto (for Load checks)."""
    sys.path.insert(0, os.path.join(SOURCE, "proto"))
    import worker_stubs
    return worker_stubs.load()


class Gateway(Proc):
    """mmgw with a generated config; the port comes from its log (listen port 0)."""
    check_exit = True

    def __init__(self, models, media="", http_extra="", listens=("127.0.0.1:0",), threads=2):
        need_file(MMGW, "mmgw")
        self.conf_dir = tempfile.mkdtemp(prefix="mmgw-api-conf-")
        self.conf_path = os.path.join(self.conf_dir, "mmgw.conf")
        self.write_conf(models, media, http_extra, listens, threads)
        super().__init__([MMGW, "-c", self.conf_path], "gateway")
        self.ports = [int(p) for p in self.wait_log(r"listening on \S+:(\d+)", len(listens))]
        self.port = self.ports[0]

    def write_conf(self, models, media="", http_extra="", listens=("127.0.0.1:0",), threads=2):
        ls = "\n".join(f"    listen {l};" for l in listens)
        text = f"http {{\n{ls}\n    worker_threads {threads};\n    access_log on;\n    {http_extra}\n}}\n"
        text += f"media {{\n    {media}\n}}\n" if media else ""
        text += models
        with open(self.conf_path, "w") as f:
            f.write(text)

    def wait_log(self, pattern, count=1, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = re.findall(pattern, self.text())
            if len(found) >= count:
                return found[:count]
            if not self.alive():
                break
            time.sleep(0.05)
        raise RuntimeError(f"gateway log never showed {pattern!r}:\n{self.text()[-3000:]}")

    def url(self, path, i=0):
        return f"http://127.0.0.1:{self.ports[i]}{path}"


def model_block(name, plugin, tokenizer, upstreams, extra=""):
    ups = " ".join(upstreams)
    return f"model {name} {{\n    plugin {plugin};\n    tokenizer {tokenizer};\n    upstream {ups};\n    {extra}\n}}\n"


# ---------------------------------------------------------------- HTTP clients

def post(gw, path, body, timeout=60, raw=None):
    """(status, parsed JSON or text) over HTTP/1.1."""
    status, parsed, _ = post_headers(gw, path, body, timeout, raw)
    return status, parsed


def post_headers(gw, path, body, timeout=60, raw=None):
    """(status, parsed JSON or text, {lower-case header name: value}) over HTTP/1.1."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(gw.url(path), data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            txt = r.read()
            status = r.status
            headers = {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        txt = e.read()
        status = e.code
        headers = {k.lower(): v for k, v in e.headers.items()}
    try:
        return status, json.loads(txt), headers
    except ValueError:
        return status, txt.decode(errors="replace"), headers


def get(gw, path, timeout=30):
    try:
        with urllib.request.urlopen(gw.url(path), timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def sse_events(gw, path, body, timeout=120):
    """POST a streaming request over HTTP/1.1; returns (status, [event data strings])."""
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    r = c.getresponse()
    txt = r.read().decode()
    c.close()
    if r.status != 200:
        return r.status, txt
    return r.status, parse_sse(txt)


def parse_sse(txt):
    events = []
    for block in txt.split("\n\n"):
        lines = [l[6:] for l in block.split("\n") if l.startswith("data: ")]
        if lines:
            events.append("\n".join(lines))
    return events


def curl_json(url, body, *opts, timeout=120):
    """POST with curl (for h2c / TLS); returns (status, http_version, parsed JSON)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(body, f)
        path = f.name
    p = subprocess.run(["curl", "-sS", "--noproxy", "*", *opts, "-H", "content-type: application/json",
                        "--data-binary", "@" + path, "-w", "\n%{http_code} %{http_version}", url],
                       capture_output=True, timeout=timeout)
    os.unlink(path)
    out = p.stdout.decode(errors="replace")
    body_txt, _, tail = out.rpartition("\n")
    parts = tail.split()
    status = int(parts[0]) if parts else 0
    ver = parts[1] if len(parts) > 1 else ""
    try:
        return status, ver, json.loads(body_txt)
    except ValueError:
        return status, ver, body_txt


def is_error(body, param=None, contains=None):
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return False
    e = body["error"]
    if not all(k in e for k in ("message", "type", "param", "code")):
        return False
    if param is not None and e["param"] != param:
        return False
    if contains is not None and contains.lower() not in e["message"].lower():
        return False
    return True


# ---------------------------------------------------------------- data

def goldens():
    """{case: {name: list}} from m3-tiny-a/goldens.safetensors (int tensors only)."""
    path = os.path.join(TESTDATA, "m3-tiny-a", "goldens.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k, t in head.items():
            if k == "__metadata__" or t["dtype"] not in ("I32", "I64"):
                continue
            f.seek(base + t["data_offsets"][0])
            a = array.array("i" if t["dtype"] == "I32" else "q")
            a.frombytes(f.read(t["data_offsets"][1] - t["data_offsets"][0]))
            case, name = k.split("/", 1)
            out.setdefault(case, {})[name] = list(a)
    return out


def data_url(path, mime=None):
    ext = path.rsplit(".", 1)[-1].lower()
    mime = mime or {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "webp": "image/webp",
                    "mp4": "video/mp4"}.get(ext, "application/octet-stream")
    with open(path, "rb") as f:
        return f"data:{mime};base64," + base64.b64encode(f.read()).decode()


class MediaServer:
    """A loopback HTTP server for media files that records every request it gets."""

    def __init__(self, files, redirects=None):
        self.files = files  # path -> bytes
        self.redirects = redirects or {}  # path -> Location (answered with 302)
        self.hits = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.hits.append(self.path)
                if self.path in outer.redirects:
                    self.send_response(302)
                    self.send_header("location", outer.redirects[self.path])
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                data = outer.files.get(self.path)
                if data is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def sanitized(binary=None):
    """Whether a binary was built with ASan (its RSS then includes the allocator's quarantine)."""
    with open(binary or MMGW, "rb") as f:
        return b"__asan_init" in f.read()

