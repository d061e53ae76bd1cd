#!/usr/bin/python3
"""A toy worker that speaks proto/worker.proto (mmgw.worker.v1) with python3-grpcio: no model, just rules.

It exists to prove that the gateway drives any runtime that speaks the protocol, and to give gateway
tests a worker whose output is known in advance:

  echo mode (default): choice i's token j is input_ids[(j + i) % len(input_ids)]
  count mode:          choice i's token j is (input_ids[-1] + 1 + i + j) % vocab

It honours max_new_tokens (unset: up to the context), n, stop_token_ids and the eos ids (unless
ignore_eos), min_new_tokens, logprobs (chosen token -0.5, other top entries -5.0), Abort (the stream ends
with CANCELLED after a Complete "abort" per open choice), a client that goes away, Load, ModelInfo, Health
and UploadTensor. Errors use the real worker's status codes: INVALID_ARGUMENT for empty input, ids out of
the vocabulary, a prompt longer than the context, tensor bytes that do not match shape and dtype, and
placeholder runs outside the prompt or on the wrong token; RESOURCE_EXHAUSTED past --max-running.

Usage: /usr/bin/python3 toy_worker.py --listen 127.0.0.1:0 --port-file /tmp/port [--rate 50] [--vocab 8199]
Stubs are generated at start from --proto (default: the repo's proto/worker.proto) with Debian's protoc and
grpc_python_plugin. SIGTERM stops accepting calls, lets streams finish (--drain seconds), exits 0.
"""
import argparse
import math
import os
import signal
import sys
import threading
import time
from concurrent import futures

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO = os.path.join(HERE, "..", "..", "proto", "worker.proto")
sys.path.insert(0, os.path.dirname(DEFAULT_PROTO))
import worker_stubs  # noqa: E402

DTYPE_SIZE = {1: 4, 2: 2, 3: 2}  # F32, BF16, F16


class Toy:
    def __init__(self, args, pb2):
        self.a = args
        self.pb2 = pb2
        self.lock = threading.Lock()
        self.live = {}      # request_id -> (abort event, done event)
        self.pages = {}     # request_id -> pages held
        self.uploads = {}   # upload_id -> bytes received
        self.streamed = 0   # tokens streamed by the process (for --crash-after-tokens)
        self.draining = False

    # ---- helpers ----
    def invalid(self, context, msg):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, msg)

    def check_request(self, req, context):
        a = self.a
        ids = list(req.input_ids)
        if not ids:
            self.invalid(context, "input_ids is empty")
        for i, t in enumerate(ids):
            if t >= a.vocab:
                self.invalid(context, "input_ids[%d] = %d is outside the vocabulary (%d)" % (i, t, a.vocab))
        if len(ids) >= a.max_context:
            self.invalid(context, "the prompt has %d tokens, the context holds %d" % (len(ids), a.max_context))
        for k, it in enumerate(req.mm_inputs):
            pv = it.pixel_values
            size = DTYPE_SIZE.get(pv.dtype)
            if size is None:
                self.invalid(context, "mm_inputs[%d].pixel_values.dtype is not F32, BF16 or F16" % k)
            need = size
            for s in pv.shape:
                need *= s
            have = len(pv.data) if pv.data else (pv.shm.length if pv.HasField("shm") else
                                                 self.uploads.get(pv.upload_id, -1))
            if have != need:
                self.invalid(context, "mm_inputs[%d].pixel_values has %d bytes, shape and dtype need %d" %
                             (k, have, need))
            tok = a.image_token if it.modality == self.pb2.IMAGE else a.video_token
            for j, r in enumerate(it.placeholders):
                if r.offset + r.length > len(ids):
                    self.invalid(context, "mm_inputs[%d].placeholders[%d] passes the prompt" % (k, j))
                for p in range(r.offset, r.offset + r.length):
                    if ids[p] != tok:
                        self.invalid(context, "mm_inputs[%d].placeholders[%d]: input_ids[%d] is not the token %d" %
                                     (k, j, p, tok))

    def token(self, ids, i, j):
        if self.a.mode == "count":
            return (ids[-1] + 1 + i + j) % self.a.vocab
        return ids[(j + i) % len(ids)]

    # ---- RPCs ----
    def Generate(self, req, context):
        pb2, a = self.pb2, self.a
        self.check_request(req, context)
        rid = req.request_id or "toy-%d" % id(req)
        sp = req.sampling
        ids = list(req.input_ids)
        n = sp.n if sp.HasField("n") else 1
        if n < 1 or n > 64:
            self.invalid(context, "sampling.n %d must be in [1, 64]" % n)
        room = a.max_context - len(ids)
        max_new = min(sp.max_new_tokens, room) if sp.HasField("max_new_tokens") else room
        min_new = sp.min_new_tokens if sp.HasField("min_new_tokens") else 0
        want_lp = req.return_logprobs or sp.HasField("logprobs")
        top_n = sp.logprobs if sp.HasField("logprobs") else 0
        stops = set(sp.stop_token_ids) | (set() if sp.ignore_eos else set(a.eos))
        abort, finished = threading.Event(), threading.Event()
        with self.lock:
            if self.draining:
                context.abort(grpc.StatusCode.UNAVAILABLE, "the worker is shutting down")
            if rid in self.live:
                self.invalid(context, "request_id '%s' is already in use" % rid)
            if a.max_running and len(self.live) >= a.max_running:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "%d requests already running" % len(self.live))
            self.live[rid] = (abort, finished)
            self.pages[rid] = n * math.ceil(len(ids) / a.block_size)
        context.add_callback(abort.set)  # the client went away
        try:
            if a.first_token_delay_ms:
                time.sleep(a.first_token_delay_ms / 1000.0)
            done = [False] * n
            count = [0] * n
            j = 0
            while not all(done):
                if abort.is_set():
                    for i in range(n):
                        if not done[i]:
                            yield pb2.GenerateResponse(request_id=rid, complete=pb2.GenerateComplete(
                                index=i, finish_reason="abort", prompt_tokens=len(ids), completion_tokens=count[i]))
                    context.abort(grpc.StatusCode.CANCELLED, "aborted")
                for i in range(n):
                    if done[i]:
                        continue
                    if max_new == 0:
                        done[i] = True
                        yield pb2.GenerateResponse(request_id=rid, complete=pb2.GenerateComplete(
                            index=i, finish_reason="length", prompt_tokens=len(ids), completion_tokens=0))
                        continue
                    t = self.token(ids, i, j)
                    if j < min_new and t in stops:  # too early to stop: take the next rule token
                        t = (t + 1) % a.vocab
                    ch = pb2.GenerateChunk(index=i, token_ids=[t])
                    if want_lp:
                        ch.logprobs.append(-0.5)
                    if top_n:
                        others = [x for x in range(top_n + 1) if x != t][:top_n - 1]
                        ch.top_logprobs.append(pb2.TopLogprobs(token_ids=[t] + others,
                                                               logprobs=[-0.5] + [-5.0] * len(others)))
                    yield pb2.GenerateResponse(request_id=rid, chunk=ch)
                    count[i] += 1
                    with self.lock:
                        self.streamed += 1
                        self.pages[rid] = sum(math.ceil((len(ids) + c) / a.block_size) for c in count)
                        crash = a.crash_after_tokens and self.streamed >= a.crash_after_tokens
                    if crash:
                        os._exit(3)  # simulate a dying worker mid-stream
                    reason = None
                    if t in stops and count[i] > min_new - 1:
                        reason = "stop"
                    elif count[i] >= max_new:
                        reason = "length"
                    if reason:
                        done[i] = True
                        c = pb2.GenerateComplete(index=i, finish_reason=reason, prompt_tokens=len(ids),
                                                 completion_tokens=count[i])
                        if reason == "stop":
                            c.matched_stop_token = t
                        yield pb2.GenerateResponse(request_id=rid, complete=c)
                j += 1
                if a.rate > 0:
                    abort.wait(1.0 / a.rate)
        finally:
            with self.lock:
                self.live.pop(rid, None)
                self.pages.pop(rid, None)
            finished.set()

    def Abort(self, req, context):
        with self.lock:
            ev = self.live.get(req.request_id)
        if ev:
            ev[0].set()
            ev[1].wait(2.0)  # like the real worker: answer once the request's pages are released
        return self.pb2.AbortResponse(found=ev is not None)

    def Health(self, req, context):
        return self.pb2.HealthResponse(healthy=not self.draining, message="draining" if self.draining else "ok")

    def ModelInfo(self, req, context):
        a = self.a
        return self.pb2.ModelInfoResponse(
            model_name=a.model_name, vocab_size=a.vocab, max_context=a.max_context, eos_token_ids=a.eos,
            block_size=a.block_size, dtype="none", model_type="toy", image_token_id=a.image_token,
            video_token_id=a.video_token, protocol_version=1, supports_shm=False, max_message_bytes=2047 << 20)

    def Load(self, req, context):
        with self.lock:
            used = sum(self.pages.values())
            running = len(self.live)
        total = self.a.total_pages
        return self.pb2.LoadResponse(running_requests=running, waiting_requests=0, free_kv_pages=max(0, total - used),
                                     total_kv_pages=total, page_tokens=self.a.block_size,
                                     available_kv_pages=max(0, total - used), running_sequences=running,
                                     max_waiting=0)

    def UploadTensor(self, request_iterator, context):
        uid, got = "", 0
        for ch in request_iterator:
            uid = ch.upload_id or uid
            if ch.offset != got:
                self.invalid(context, "upload '%s': chunk at offset %d, expected %d" % (uid, ch.offset, got))
            got += len(ch.data)
        with self.lock:
            self.uploads[uid] = got
        return self.pb2.UploadTensorResponse(upload_id=uid, received_bytes=got)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", required=True, help="HOST:PORT (port 0 = any free one)")
    p.add_argument("--port-file", help="write the bound port here once listening")
    p.add_argument("--proto", default=DEFAULT_PROTO)
    p.add_argument("--mode", choices=["echo", "count"], default="echo")
    p.add_argument("--vocab", type=int, default=8199)
    p.add_argument("--max-context", type=int, default=4096)
    p.add_argument("--eos", type=lambda s: [int(x) for x in s.split(",") if x], default=[],
                   help="comma-separated eos ids (default none)")
    p.add_argument("--rate", type=float, default=0.0, help="tokens per second per stream (0 = no limit)")
    p.add_argument("--first-token-delay-ms", type=float, default=0.0)
    p.add_argument("--model-name", default="toy")
    p.add_argument("--image-token", type=int, default=8195)
    p.add_argument("--video-token", type=int, default=8196)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--total-pages", type=int, default=4096)
    p.add_argument("--max-running", type=int, default=0, help="RESOURCE_EXHAUSTED past this many streams (0 = no cap)")
    p.add_argument("--crash-after-tokens", type=int, default=0, help="exit(3) after streaming this many tokens")
    p.add_argument("--threads", type=int, default=64)
    p.add_argument("--drain", type=float, default=10.0, help="seconds streams may take to finish on SIGTERM")
    a = p.parse_args()

    pb2, pb2_grpc = worker_stubs.load(a.proto)
    toy = Toy(a, pb2)
    # no SO_REUSEPORT: with it, binding port 0 can hand out a port another server already holds, and two
    # servers would then share its connections
    opts = [("grpc.max_receive_message_length", 2047 << 20), ("grpc.max_send_message_length", 2047 << 20),
            ("grpc.so_reuseport", 0)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=a.threads), options=opts)
    pb2_grpc.add_WorkerServicer_to_server(toy, server)
    port = server.add_insecure_port(a.listen)
    if not port:
        sys.exit("toy_worker: cannot listen on %s" % a.listen)
    server.start()
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.rename(tmp, a.port_file)
    print("toy_worker listening on port %d" % port, flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    with toy.lock:
        toy.draining = True
    server.stop(grace=a.drain).wait()
    sys.exit(0)


if __name__ == "__main__":
    main()
