"""Client-side helpers for tests and benchmarks that speak proto/worker.proto (run with /usr/bin/python3).

- gen_stubs(): Python stubs from proto/worker.proto, made at run time (proto/worker_stubs.py).
- WorkerProc: start a worker binary (or script) on a loopback port and wait until it answers Health.
- generate(): run one Generate stream and collect tokens, completes and the final status.
- read_safetensors(): a small reader for the golden files (numpy).

Only loopback addresses are ever contacted.
"""
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import numpy as np

SRC = os.environ.get("MMGW_SOURCE") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(SRC, "proto"))
from worker_stubs import load as gen_stubs  # noqa: E402  (worker_pb2, worker_pb2_grpc)


MAX_MSG = 2047 * 1024 * 1024
CHANNEL_OPTS = [("grpc.max_receive_message_length", MAX_MSG), ("grpc.max_send_message_length", MAX_MSG)]


class WorkerProc:
    """A worker process listening on 127.0.0.1 with a port chosen by the OS (reported via --port-file)."""

    def __init__(self, argv, port_flag="--port-file", listen_flag="--listen", env=None, log_path=None,
                 port_file=None):
        self.tmp = tempfile.mkdtemp(prefix="mmgw-worker-")
        self.port_file = port_file or os.path.join(self.tmp, "port")
        self.log_path = log_path or os.path.join(self.tmp, "worker.log")
        self.argv = list(argv) + [listen_flag, "127.0.0.1:0", port_flag, self.port_file]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = None
        self.channel = None
        self.stub = None

    def wait_ready(self, timeout=120.0):
        pb2, pb2_grpc = gen_stubs()
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("worker exited with %s:\n%s" % (self.proc.returncode, self.log_text()))
            if os.path.exists(self.port_file):
                with open(self.port_file) as f:
                    txt = f.read().strip()
                if txt:
                    self.port = int(txt)
                    break
            time.sleep(0.05)
        if self.port is None:
            raise RuntimeError("worker did not report a port within %.0f s:\n%s" % (timeout, self.log_text()))
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.port, options=CHANNEL_OPTS)
        grpc.channel_ready_future(self.channel).result(timeout=max(1.0, end - time.time()))
        self.stub = pb2_grpc.WorkerStub(self.channel)
        self.stub.Health(pb2.HealthRequest(), timeout=30)
        return self

    def log_text(self):
        if not self.log.closed:  # closed once the worker was stopped; the file is still there
            self.log.flush()
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-8000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=60.0):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        if self.channel:
            self.channel.close()
            self.channel = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Result:
    def __init__(self):
        self.tokens = {}      # choice -> [ids]
        self.logprobs = {}    # choice -> [float]
        self.top = {}         # choice -> [[(id, lp)...] per token]
        self.completes = {}   # choice -> GenerateComplete
        self.code = None      # grpc.StatusCode
        self.details = ""
        self.chunks = 0
        self.first_token_s = None
        self.t0 = None
        self.t_end = None
        self.order_ok = True  # no chunk after a choice's complete


def generate(stub, req, timeout=600.0, on_chunk=None, call_holder=None):
    """Run one Generate stream to its end. on_chunk(result) is called after every chunk; call_holder (a list)
    receives the call object so another thread can cancel it."""
    r = Result()
    r.t0 = time.time()
    call = stub.Generate(req, timeout=timeout)
    if call_holder is not None:
        call_holder.append(call)
    try:
        for resp in call:
            which = resp.WhichOneof("response")
            if which == "chunk":
                c = resp.chunk
                if c.index in r.completes:
                    r.order_ok = False
                if r.first_token_s is None and len(c.token_ids):
                    r.first_token_s = time.time() - r.t0
                r.tokens.setdefault(c.index, []).extend(c.token_ids)
                r.logprobs.setdefault(c.index, []).extend(c.logprobs)
                for t in c.top_logprobs:
                    r.top.setdefault(c.index, []).append(list(zip(t.token_ids, t.logprobs)))
                r.chunks += 1
                if on_chunk:
                    on_chunk(r)
            elif which == "complete":
                r.completes[resp.complete.index] = resp.complete
        r.code = grpc.StatusCode.OK
    except grpc.RpcError as e:
        r.code = e.code()
        r.details = e.details() or ""
    r.t_end = time.time()
    return r


def make_request(pb2, rid, ids, max_new=None, n=None, temperature=0.0, ignore_eos=True, media=(), stop=(),
                 logprobs=None, return_logprobs=False, seed=None, min_new=None):
    sp = pb2.SamplingParams(ignore_eos=ignore_eos, stop_token_ids=list(stop))
    if max_new is not None:
        sp.max_new_tokens = int(max_new)
    if n is not None:
        sp.n = int(n)
    if temperature is not None:
        sp.temperature = float(temperature)
    if logprobs is not None:
        sp.logprobs = int(logprobs)
    if seed is not None:
        sp.seed = int(seed)
    if min_new is not None:
        sp.min_new_tokens = int(min_new)
    return pb2.GenerateRequest(request_id=rid, input_ids=[int(x) for x in ids], sampling=sp, mm_inputs=list(media),
                               return_logprobs=return_logprobs)


def placeholder_runs(ids, tok):
    """[(offset, length)] of the runs of token tok in ids."""
    runs = []
    i, n = 0, len(ids)
    while i < n:
        if ids[i] == tok:
            j = i
            while j < n and ids[j] == tok:
                j += 1
            runs.append((i, j - i))
            i = j
        else:
            i += 1
    return runs


def bf16_bytes(a):
    """float32 array -> BF16 little-endian bytes, round to nearest even (as the worker and torch do)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def bf16_round(a):
    """float32 array rounded through BF16 and back (what the worker sees from bf16_bytes)."""
    h = np.frombuffer(bf16_bytes(a), dtype=np.uint16).astype(np.uint32) << 16
    return h.view(np.float32).reshape(np.shape(a))


def tensor(pb2, arr, dtype="F32"):
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if dtype == "F32":
        return pb2.Tensor(dtype=pb2.F32, shape=list(arr.shape), data=arr.tobytes())
    if dtype == "BF16":
        return pb2.Tensor(dtype=pb2.BF16, shape=list(arr.shape), data=bf16_bytes(arr))
    if dtype == "F16":
        return pb2.Tensor(dtype=pb2.F16, shape=list(arr.shape), data=arr.astype(np.float16).tobytes())
    raise ValueError(dtype)


def media_items(pb2, ids, pixel_values, grids, modality, token_id, dtype="F32"):
    """MultimodalItems for consecutive items whose patch rows are concatenated in pixel_values (as the HF
    processor returns them), with placeholder runs found in ids in order."""
    runs = placeholder_runs(list(ids), token_id)
    items, row, ri = [], 0, 0
    for g in grids:
        t, h, w = (int(x) for x in g)
        rows = t * h * w
        n_runs = 1 if modality == pb2.IMAGE else t
        its = runs[ri:ri + n_runs]
        ri += n_runs
        pv = pixel_values[row:row + rows]
        row += rows
        items.append(pb2.MultimodalItem(modality=modality, pixel_values=tensor(pb2, pv, dtype), grid_thw=[t, h, w],
                                        placeholders=[pb2.PlaceholderRange(offset=o, length=l) for o, l in its]))
    return items


class SafeTensors:
    """Read-only safetensors file: names, and tensors as numpy arrays."""
    DT = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "F64": np.float64}

    def __init__(self, path):
        self.f = open(path, "rb")
        n = struct.unpack("<Q", self.f.read(8))[0]
        self.h = json.loads(self.f.read(n))
        self.h.pop("__metadata__", None)
        self.base = 8 + n

    def names(self):
        return list(self.h)

    def __contains__(self, k):
        return k in self.h

    def get(self, k):
        v = self.h[k]
        a, b = v["data_offsets"]
        # os.pread: no shared file position, so threads building requests at once read the right bytes
        data = os.pread(self.f.fileno(), b - a, self.base + a)
        return np.frombuffer(data, dtype=self.DT[v["dtype"]]).reshape(v["shape"])


def write_safetensors(path, tensors):
    """tensors: name -> numpy array (float32 / int32 / int64)."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32", np.dtype(np.int64): "I64"}
    header, off, blobs = {}, 0, []
    for k, a in tensors.items():
        a = np.ascontiguousarray(a)
        b = a.tobytes()
        header[k] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hj = json.dumps(header).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def run_threads(fns):
    """Run callables in parallel threads; return their results in order."""
    out = [None] * len(fns)

    def wrap(i, fn):
        out[i] = fn()

    ts = [threading.Thread(target=wrap, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out
