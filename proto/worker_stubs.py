"""Python stubs for worker.proto, generated at run time (nothing generated is kept in the repo).

    import worker_stubs
    pb2, pb2_grpc = worker_stubs.load()            # this folder's worker.proto
    pb2, pb2_grpc = worker_stubs.load(path)        # another copy of the contract

Runs Debian's protoc with grpc_python_plugin into a temporary folder, once per process (later calls return
the same modules), and imports worker_pb2 / worker_pb2_grpc from there; the folder is removed at exit. Used by
the Python workers and clients of the tests (tests/toy_worker, tests/integration/*) and benchmarks."""
import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

PROTO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.proto")
PLUGIN = "/usr/bin/grpc_python_plugin"

_loaded = None


def load(proto=PROTO):
    """(worker_pb2, worker_pb2_grpc) generated from proto (a path to worker.proto)."""
    global _loaded
    if _loaded:
        return _loaded
    proto = os.path.abspath(proto)
    out = tempfile.mkdtemp(prefix="mmgw-stubs-")
    atexit.register(shutil.rmtree, out, True)
    subprocess.run(["protoc", "--proto_path=" + os.path.dirname(proto), "--python_out=" + out, "--grpc_out=" + out,
                    "--plugin=protoc-gen-grpc=" + PLUGIN, proto], check=True)
    sys.path.insert(0, out)
    _loaded = importlib.import_module("worker_pb2"), importlib.import_module("worker_pb2_grpc")
    return _loaded
