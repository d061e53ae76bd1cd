#!/usr/bin/python3
"""A scripted worker for the API tests: every Generate streams the token ids written in --script (a JSON
file re-read on each call, so a test can change it between requests), one token per chunk, then a Complete.

  {"ids": [..], "finish": "stop"|"length"|"abort", "die_after": K, "error": "UNAVAILABLE",
   "complete": false, "end_error": "RESOURCE_EXHAUSTED"}

die_after K: after K chunks the call fails with INTERNAL (a worker failing mid-stream); error: the call fails
with that status before any chunk; complete false: no Complete is sent (the stream just ends OK); end_error:
after the Completes the call fails with that status (what mmgw-worker does when it ends a request with an
error: every open choice "abort", then the status). Choices (sampling.n) all get the same ids. Speaks
proto/worker.proto;
loopback only. Usage: script_worker.py --listen 127.0.0.1:0 --port-file F --script S [--vocab V] [--eos ID]
"""
import argparse
import json
import os
import signal
import sys
import threading
from concurrent import futures

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "proto"))
import worker_stubs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--script", required=True)
    ap.add_argument("--vocab", type=int, default=720)
    ap.add_argument("--eos", type=int, default=-1)
    a = ap.parse_args()
    pb2, pb2_grpc = worker_stubs.load()

    class W(pb2_grpc.WorkerServicer):
        def Generate(self, req, ctx):
            with open(a.script) as f:
                s = json.load(f)
            if s.get("error"):
                ctx.abort(getattr(grpc.StatusCode, s["error"]), "scripted failure")
            n = req.sampling.n if req.sampling.HasField("n") else 1
            for k, t in enumerate(s["ids"]):
                if s.get("die_after") is not None and k >= s["die_after"]:
                    ctx.abort(grpc.StatusCode.INTERNAL, "scripted crash mid-stream")
                for i in range(n):
                    yield pb2.GenerateResponse(request_id=req.request_id, chunk=pb2.GenerateChunk(index=i, token_ids=[t]))
            for i in range(n if s.get("complete", True) else 0):
                yield pb2.GenerateResponse(request_id=req.request_id, complete=pb2.GenerateComplete(
                    index=i, finish_reason=s.get("finish", "stop"), prompt_tokens=len(req.input_ids),
                    completion_tokens=len(s["ids"]), cached_tokens=s.get("cached", 0)))
            if s.get("end_error"):
                ctx.abort(getattr(grpc.StatusCode, s["end_error"]), "scripted failure after the choices ended")

        def Abort(self, req, ctx):
            return pb2.AbortResponse(found=False)

        def Health(self, req, ctx):
            return pb2.HealthResponse(healthy=True, message="ok")

        def ModelInfo(self, req, ctx):
            return pb2.ModelInfoResponse(model_name="script", vocab_size=a.vocab, max_context=8192,
                                         eos_token_ids=[a.eos] if a.eos >= 0 else [], block_size=16,
                                         protocol_version=1)

        def Load(self, req, ctx):
            return pb2.LoadResponse(total_kv_pages=1000, free_kv_pages=1000, page_tokens=16)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.so_reuseport", 0)])
    pb2_grpc.add_WorkerServicer_to_server(W(), server)
    port = server.add_insecure_port(a.listen)
    server.start()
    with open(a.port_file + ".tmp", "w") as f:
        f.write(f"{port}\n")
    os.rename(a.port_file + ".tmp", a.port_file)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(1).wait()


if __name__ == "__main__":
    main()
