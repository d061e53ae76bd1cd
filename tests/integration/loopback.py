"""Helpers shared by the Python integration tests and benchmarks that run servers on loopback
(tests/integration/api, tests/integration/http, bench/http, bench/api): a free port, a process's memory, a
self-signed certificate. Only 127.0.0.1 is ever bound."""
import os
import socket
import subprocess


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (bound, read back, closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss_kb(*pids):
    """Resident memory of the processes, summed, in KiB (a process that is gone counts 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total


def make_cert(d):
    """A self-signed certificate for localhost and 127.0.0.1 in folder d: (cert path, key path)."""
    key, crt = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return crt, key
