#!/usr/bin/python3
"""A scriptable worker for the gateway's gRPC client and router tests.

Speaks proto/worker.proto (stubs generated at start-up with Debian's protoc and grpc_python_plugin) on
127.0.0.1 only, and records what it saw as JSON lines in --log so tests can assert on it: which
requests arrived, how their tensors travelled and what their bytes summed to, which Aborts and client
cancellations it received. Behaviour knobs (all optional):

  --id N             tokens it streams are N*1000 + i, so a test knows who served a request
  --tokens N         chunks per Generate (one token each, or --chunk-ids ids each)
  --delay-ms D       pause between chunks
  --die-after K      exit the whole process abruptly after sending K chunks (worker crash mid-stream)
  --fail-first N     answer the first N Generate calls with --fail-code (default UNAVAILABLE)
  --fail-all         answer every Generate with --fail-code
  --running R --waiting W   what Load reports
  --unhealthy        Health says healthy=false
  --supports-shm     ModelInfo says supports_shm=true
  --shm-dir DIR      where shared-memory objects are looked up (default /dev/shm; another folder plays a
                     worker in a container with its own /dev/shm: NOT_FOUND, as mmgw-worker answers)
  --max-message B    receive limit, reported in ModelInfo.max_message_bytes
Health's message carries "yielded=<chunks sent so far in all streams>" for flow-control tests.
"""
import argparse
import json
import os
import sys
import threading
import time
import zlib
from concurrent import futures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--id", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=5)
    ap.add_argument("--chunk-ids", type=int, default=1)
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--die-after", type=int, default=-1)
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--fail-all", action="store_true")
    ap.add_argument("--fail-code", default="UNAVAILABLE")
    ap.add_argument("--running", type=int, default=0)
    ap.add_argument("--waiting", type=int, default=0)
    ap.add_argument("--unhealthy", action="store_true")
    ap.add_argument("--supports-shm", action="store_true")
    ap.add_argument("--shm-dir", default="/dev/shm")
    ap.add_argument("--max-message", type=int, default=64 << 20)
    args = ap.parse_args()

    import grpc
    sys.path.insert(0, args.proto_dir)
    import worker_stubs  # noqa: E402
    pb, pb_grpc = worker_stubs.load(os.path.join(args.proto_dir, "worker.proto"))

    lock = threading.Lock()
    state = {"generates": 0, "yielded": 0}
    uploads = {}
    aborted = set()
    logf = open(args.log, "a", buffering=1)

    def log(**ev):
        with lock:
            logf.write(json.dumps(ev) + "\n")

    def tensor_bytes(t):
        if t.upload_id:
            with lock:
                data = uploads.get(t.upload_id)
            return "upload", data
        if t.HasField("shm") and t.shm.name:
            with open(args.shm_dir + t.shm.name, "rb") as f:
                f.seek(t.shm.offset)
                return "shm", f.read(t.shm.length)
        return "inline", t.data

    class Worker(pb_grpc.WorkerServicer):
        def Generate(self, req, context):
            with lock:
                state["generates"] += 1
                n = state["generates"]
            mm = []
            for item in req.mm_inputs:
                try:
                    how, data = tensor_bytes(item.pixel_values)
                except FileNotFoundError:
                    log(ev="generate", id=req.request_id, n=n, shm_missing=item.pixel_values.shm.name)
                    context.abort(grpc.StatusCode.NOT_FOUND, "shm '%s': No such file or directory"
                                  % item.pixel_values.shm.name)
                mm.append({"transport": how, "bytes": -1 if data is None else len(data),
                           "crc": 0 if data is None else zlib.crc32(data),
                           "shape": list(item.pixel_values.shape), "dtype": item.pixel_values.dtype})
            log(ev="generate", id=req.request_id, n=n, inputs=list(req.input_ids), mm=mm)
            if args.fail_all or n <= args.fail_first:
                context.abort(getattr(grpc.StatusCode, args.fail_code), "scripted failure %d" % n)
            for i in range(args.tokens):
                if req.request_id in aborted:
                    log(ev="stopped", id=req.request_id, sent=i)
                    context.abort(grpc.StatusCode.CANCELLED, "aborted")
                if not context.is_active():
                    log(ev="client_cancel", id=req.request_id, sent=i)
                    return
                if args.die_after >= 0 and i == args.die_after:
                    log(ev="dying", id=req.request_id, sent=i)
                    logf.flush()
                    time.sleep(0.3)  # let gRPC put the chunks already yielded on the wire
                    os._exit(3)
                ids = [args.id * 1000 + i] * args.chunk_ids
                yield pb.GenerateResponse(request_id=req.request_id,
                                          chunk=pb.GenerateChunk(index=0, token_ids=ids))
                with lock:
                    state["yielded"] += 1
                if args.delay_ms:
                    time.sleep(args.delay_ms / 1000.0)
            yield pb.GenerateResponse(request_id=req.request_id, complete=pb.GenerateComplete(
                index=0, finish_reason="length", prompt_tokens=len(req.input_ids),
                completion_tokens=args.tokens))
            log(ev="finished", id=req.request_id)

        def Abort(self, req, context):
            with lock:
                aborted.add(req.request_id)
            log(ev="abort", id=req.request_id)
            return pb.AbortResponse(found=True)

        def Health(self, req, context):
            with lock:
                y = state["yielded"]
            return pb.HealthResponse(healthy=not args.unhealthy, message="yielded=%d" % y)

        def ModelInfo(self, req, context):
            return pb.ModelInfoResponse(model_name="fake-%d" % args.id, vocab_size=100000, max_context=4096,
                                        block_size=4, dtype="bfloat16", model_type="fake", protocol_version=1,
                                        supports_shm=args.supports_shm, max_message_bytes=args.max_message)

        def Load(self, req, context):
            return pb.LoadResponse(running_requests=args.running, waiting_requests=args.waiting,
                                   free_kv_pages=100, total_kv_pages=100, page_tokens=4)

        def UploadTensor(self, chunks, context):
            uid, buf, total = None, bytearray(), 0
            for c in chunks:
                if uid is None:
                    uid, total = c.upload_id, c.total_bytes
                if c.offset != len(buf):
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "chunk offset %d, have %d" % (c.offset, len(buf)))
                buf.extend(c.data)
            with lock:
                uploads[uid] = bytes(buf)
            log(ev="upload", upload_id=uid, bytes=len(buf), total=total, crc=zlib.crc32(bytes(buf)))
            return pb.UploadTensorResponse(upload_id=uid or "", received_bytes=len(buf))

    opts = [("grpc.max_receive_message_length", args.max_message),
            ("grpc.max_send_message_length", args.max_message),
            ("grpc.so_reuseport", 0)]  # port 0 must give a port nobody else holds
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32), options=opts)
    pb_grpc.add_WorkerServicer_to_server(Worker(), server)
    port = server.add_insecure_port("127.0.0.1:%d" % args.port)
    if port == 0:
        sys.exit("cannot bind 127.0.0.1:%d" % args.port)
    server.start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.rename(tmp, args.port_file)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
