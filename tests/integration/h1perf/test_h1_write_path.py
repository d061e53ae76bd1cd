#!/usr/bin/python3
"""HTTP/1.1 write path: direct writes from the loop's flush event, the fall back to the socket's write event
while a client does not read, the way back, and request arenas reused across requests on a loop.

Uses the server core with the HTTP test routes (build/tests/mmgw-httptest, tests/integration/http) and raw
sockets on loopback; every wait is bounded. Usage: test_h1_write_path.py CASE; exit 0 pass, 1 fail, 77 skip.
"""
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "http"))
import test_http as th  # noqa: E402  (Server, Raw, base_conf, get, check, stats)

check = th.check


def conf(extra=""):
    """One loop, so every request of a case shares one arena pool and one flush list."""
    return f"""
http {{
    listen 127.0.0.1:0;
    worker_threads 1;
    access_log off;
    client_max_body_size 1m;
    client_max_header_size 32k;
    {extra}
}}
"""


def echo(body, extra=b""):
    return (b"POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n" + extra +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def case_stall_resume():
    """A client that stops reading a large response: the rest waits for the socket (write event), arrives
    complete, and the same connection then serves keep-alive and pipelined requests again."""
    with th.Server(conf("stream_buffer_max 256k;")) as srv:
        r = th.Raw(srv.ports[0], rcvbuf=4096)
        r.send(th.get("/test/sse?n=400&size=10000"))  # ~4 MB: far more than the socket buffers take
        time.sleep(0.5)
        st = th.stats(srv)
        check(st["sse_started"] == 1 and st["sse_done"] == 0, f"stream waits for the reader: {st}")
        code, _, body = r.response()
        ev = th.parse_sse(body)
        check(code == 200 and len(ev) == 401 and ev[-1] == b"[DONE]", f"stalled stream complete: {len(ev)} events")
        check([int(e[:12]) for e in ev[:-1]] == list(range(400)), "stalled stream in order")
        # back to direct writes: keep-alive requests one by one, then a pipelined burst
        for i in range(20):
            body = (b"%06d" % i) * (1 + i * 50)
            r.send(echo(body))
            code, hd, got = r.response()
            check(code == 200 and got == body, f"keep-alive request {i} after the stall: {code} {len(got)}")
        bodies = [(b"p%05d" % i) * (1 + 37 * i) for i in range(30)]
        r.send(b"".join(echo(b) for b in bodies))
        for i, b in enumerate(bodies):
            code, _, got = r.response()
            check(code == 200 and got == b, f"pipelined request {i} after the stall")
        r.close()


def case_arena_reuse():
    """Requests whose arenas are reused (small ones, and ones that grew extra blocks) never see each other's
    headers, bodies or ids: many connections, interleaved, each response checked against its own request."""
    rnd = random.Random(5)
    with th.Server(conf()) as srv:
        conns = [th.Raw(srv.ports[0]) for _ in range(6)]
        ids = set()
        for step in range(300):
            k = rnd.randrange(len(conns))
            size = rnd.choice([0, 1, 17, 900, 5000, 20000, 70000])
            body = bytes(rnd.randrange(256) for _ in range(min(size, 64))) * (size // 64 + 1)
            body = body[:size]
            # many and long headers make the request's arena grow past its first block
            extra = b"".join(b"x-fill-%d: %s\r\n" % (j, b"v" * rnd.randrange(1, 300))
                             for j in range(rnd.randrange(0, 40)))
            conns[k].send(echo(body, extra))
            code, hd, got = conns[k].response()
            check(code == 200 and got == body and hd.get("x-body-len") == str(size),
                  f"step {step}: echo of {size} bytes on connection {k}: {code} {len(got)} {hd.get('x-body-len')}")
            rid = hd.get("x-request-id", "")
            check(len(rid) == 16 and all(c in "0123456789abcdef" for c in rid) and rid not in ids,
                  f"step {step}: request id {rid!r} well-formed and unique")
            ids.add(rid)
        for c in conns:
            c.close()


def case_client_gone():
    """Clients that vanish while their response is being written (reset with unread data, or half-way
    through a stalled stream) do not disturb the loop: the aborts are seen and other clients are served."""
    with th.Server(conf("stream_buffer_max 256k;")) as srv:
        before = th.stats(srv)["aborts"]
        for i in range(10):
            s = socket.create_connection(("127.0.0.1", srv.ports[0]), timeout=5)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(th.get("/test/sse?n=3000&size=10000"))  # 30 MB: never all in the socket buffers
            time.sleep(0.2)
            # SO_LINGER 0: close sends a reset, so the server's next write fails instead of blocking
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        check(th.wait_for(lambda: th.stats(srv)["aborts"] >= before + 10), "every vanished client aborted its stream")
        r = th.Raw(srv.ports[0])
        for i in range(5):
            r.send(echo(b"still here %d" % i))
            code, _, got = r.response()
            check(code == 200 and got == b"still here %d" % i, f"served after the resets ({i})")
        r.close()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def big(size, close=False):
    return (b"GET /test/big?size=%d HTTP/1.1\r\nHost: x\r\n" % size +
            (b"Connection: close\r\n" if close else b"") + b"\r\n")


def case_pipeline_bounded():
    """A client that pipelines many small requests for large responses and reads nothing: the server parses
    the next request only once the output has drained (as nginx does), so its memory stays bounded instead
    of holding every response; all responses then arrive in order, also after the client half-closed."""
    n, size = 64, 1 << 20
    th.small_asan_quarantine()
    expect = bytes((ord("a") + i % 26) for i in range(size))
    with th.Server(conf()) as srv:
        r = th.Raw(srv.ports[0], rcvbuf=4096)
        r.send(big(size))  # warm-up: the loop's buffers reach their steady size
        code, _, got = r.response()
        check(code == 200 and got == expect, "warm-up response")
        base = rss_kib(srv.proc.pid)
        r.send(b"".join(big(size) for _ in range(n)))  # 64 MB of responses for ~2 KB of requests
        time.sleep(1.0)
        grown = rss_kib(srv.proc.pid) - base
        check(grown < 24 * 1024, f"server memory bounded while the client reads nothing: grew {grown} KiB")
        for i in range(n):
            code, _, got = r.response()
            check(code == 200 and got == expect, f"pipelined response {i}: {code} {len(got)}")
        r.close()
        # pipelined requests followed by a half-close: every one is still answered, then EOF
        r = th.Raw(srv.ports[0], rcvbuf=4096)
        r.send(b"".join(big(size) for _ in range(8)))  # more than the socket buffers take
        r.s.shutdown(socket.SHUT_WR)
        for i in range(8):
            code, _, got = r.response()
            check(code == 200 and got == expect, f"response {i} after the half-close: {code}")
        try:
            r._fill()
            eof = False
        except EOFError:
            eof = True
        check(eof and not r.buf, "the server closes after the last pipelined response")
        r.close()
        # ... and when the last pipelined request is cut short by the half-close (its body never comes), the
        # complete ones are answered and the connection closes at once, not after the body timeout
        r = th.Raw(srv.ports[0], rcvbuf=4096)
        r.send(b"".join(big(size) for _ in range(8)) + echo(b"x" * 100)[:-60])
        r.s.shutdown(socket.SHUT_WR)
        t0 = time.time()
        for i in range(8):
            code, _, got = r.response()
            check(code == 200 and got == expect, f"response {i} before the cut request: {code}")
        try:
            r._fill()
            eof = False
        except (EOFError, ConnectionResetError):
            eof = True
        check(eof and time.time() - t0 < 3.0, f"closed after the cut request ({time.time() - t0:.1f} s)")
        r.close()
        # clients that reset while their pipelined responses wait: the server lets go of them at once
        fds = lambda: len(os.listdir(f"/proc/{srv.proc.pid}/fd"))  # noqa: E731
        base = fds()
        for i in range(5):
            s = socket.create_connection(("127.0.0.1", srv.ports[0]), timeout=5)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"".join(big(size) for _ in range(16)))
            time.sleep(0.1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        check(th.wait_for(lambda: fds() <= base, timeout=3.0), f"reset connections closed: {fds()} fds, {base} before")
        r = th.Raw(srv.ports[0])
        r.send(big(10))
        code, _, got = r.response()
        check(code == 200 and got == expect[:10], "served after the resets")
        r.close()



def case_send_timeout():
    """A client that reads nothing of a finished (non-streamed) response is cut one send_timeout after the
    last progress, not two (the timeout must not turn into another wait for the same output to flush)."""
    with th.Server(conf("send_timeout 1s;")) as srv:
        fds = lambda: len(os.listdir(f"/proc/{srv.proc.pid}/fd"))  # noqa: E731
        base = fds()
        r = th.Raw(srv.ports[0], rcvbuf=4096)
        r.send(big(8 << 20))  # far more than the socket buffers take
        check(th.wait_for(lambda: fds() > base, timeout=2.0), "connection open")
        t0 = time.time()
        check(th.wait_for(lambda: fds() <= base, timeout=5.0), "stalled connection closed")
        took = time.time() - t0
        check(took < 1.7, f"closed {took:.2f} s after the response stalled (send_timeout 1s)")
        r.close()

CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: test_h1_write_path.py " + "|".join(CASES))
        return 2
    if not os.path.exists(th.HTTPTEST):
        print(f"skip: {th.HTTPTEST} not built")
        return 77
    CASES[sys.argv[1]]()
    print(f"{th.CHECKS[0]} checks, {len(th.FAILURES)} failed")
    return 1 if th.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
