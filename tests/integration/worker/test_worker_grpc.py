#!/usr/bin/python3
"""Interop test of the worker protocol with python3-grpcio (stubs generated from proto/worker.proto).

Targets:
  real  build/bin/mmgw-worker on the golden checkpoint (../shared/testdata/m3-tiny-a): greedy output of every
        golden case equals the golden `greedy` and mmgw-run's; BF16 media equal mmgw-run on BF16-rounded
        pixels; then every protocol check below. Without golden data it runs on an mmgw-mkdemo checkpoint and
        says which golden checks it skipped.
  fake  tests/wk_fake_worker (mmgw-worker's main over the scheduler test double): the protocol checks only.
  toy   tests/toy_worker/toy_worker.py: the same client code against a worker written in Python.

Protocol checks: 16 concurrent streams each equal their solo result; n > 1; logprobs; prefix reuse
(cached_tokens); Abort mid-stream frees pages at once (Load shows it); a client that goes away frees them
too; every malformed request gets its status code and the worker keeps serving; UploadTensor and shared
memory give the same tokens as inline bytes; the queue bound answers RESOURCE_EXHAUSTED; a cache smaller than
the model's context is the advertised context, and a request that could never fit the pool is INVALID_ARGUMENT;
SIGTERM drains (running streams finish, new calls are refused, exit 0); a second SIGTERM ends them UNAVAILABLE,
still exit 0.

Exit 0 pass, 1 fail, 77 skipped (with the reason printed).
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import grpc
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wk_client as wc  # noqa: E402

FAILS = []
SKIPS = []


def check(cond, what):
    if cond:
        print("  ok   " + what, flush=True)
    else:
        print("  FAIL " + what, flush=True)
        FAILS.append(what)
    return cond


def skip(what):
    print("  skip " + what, flush=True)
    SKIPS.append(what)


class Ctx:
    def __init__(self, target, w, pb2):
        self.target = target
        self.w = w
        self.stub = w.stub
        self.pb2 = pb2
        self.info = w.stub.ModelInfo(pb2.ModelInfoRequest(), timeout=30)
        self.vocab = self.info.vocab_size
        self.ctx = self.info.max_context
        self.img = self.info.image_token_id
        self.row_len = 1176 if target == "real" else 6  # the M3 patch row: 3 * 2 * 14 * 14
        ld = w.stub.Load(pb2.LoadRequest(), timeout=30)
        self.pool_tokens = ld.total_kv_pages * ld.page_tokens

    def long_new(self, prompt_len, want=3000):
        """A generation length that fits both the context and the cache pool."""
        return max(1, min(want, self.ctx - prompt_len - 1, self.pool_tokens - prompt_len - 2 * self.info.block_size))

    def prompt(self, n, seed):
        rng = np.random.default_rng(seed)
        lo, hi = 10, min(self.vocab, 8000) - 10
        ids = rng.integers(lo, hi, size=n)
        return [int(x) for x in ids if x not in (self.img, self.info.video_token_id)] or [lo]

    def rid(self, tag):
        return "%s-%s" % (tag, uuid.uuid4().hex[:8])

    def gen(self, ids, max_new, **kw):
        req = wc.make_request(self.pb2, kw.pop("rid", None) or self.rid("g"), ids, max_new=max_new, **kw)
        return wc.generate(self.stub, req, timeout=kw.pop("timeout", 600))

    def load(self):
        return self.stub.Load(self.pb2.LoadRequest(), timeout=30)


# ---------------------------------------------------------------------------------------------------------
# golden checks (real target)

GOLDEN_CASES = ["text_short", "text_sparse", "image", "video", "multi", "long"]


def golden_request(c, gd, case, max_new, dtype="F32", rid=None):
    pb2 = c.pb2
    ids = [int(x) for x in gd.get(case + "/ids")]
    media = []
    if case + "/pixel_values" in gd:
        media += wc.media_items(pb2, ids, gd.get(case + "/pixel_values"), gd.get(case + "/image_grid_thw"), pb2.IMAGE,
                                c.img, dtype)
    if case + "/pixel_values_videos" in gd:
        media += wc.media_items(pb2, ids, gd.get(case + "/pixel_values_videos"), gd.get(case + "/video_grid_thw"),
                                pb2.VIDEO, c.info.video_token_id, dtype)
    return wc.make_request(pb2, rid or c.rid(case), ids, max_new=max_new, media=media)


def run_mmgw_run(build, model, eval_path, tmp):
    exe = os.path.join(build, "bin", "mmgw-run")
    if not os.path.exists(exe):
        return None, "no %s" % exe
    out = os.path.join(tmp, "run_out_%s.safetensors" % uuid.uuid4().hex[:6])
    p = subprocess.run([exe, "--model", model, "--eval", eval_path, "--out", out], capture_output=True, text=True)
    if p.returncode != 0:
        return None, "mmgw-run failed (%d): %s" % (p.returncode, p.stderr[-2000:])
    return wc.SafeTensors(out), None


def suite_golden(c, args, tmp):
    print("golden cases vs the golden greedy and mmgw-run", flush=True)
    gpath = os.path.join(args.model, "goldens.safetensors")
    gd = wc.SafeTensors(gpath)
    ran, why = run_mmgw_run(args.build, args.model, gpath, tmp)
    if ran is None:
        check(False, "mmgw-run on the goldens (%s)" % why)
    solo = {}
    for case in GOLDEN_CASES:
        want = [int(x) for x in gd.get(case + "/greedy")]
        r = wc.generate(c.stub, golden_request(c, gd, case, len(want)), timeout=600)
        got = r.tokens.get(0, [])
        solo[case] = got
        check(r.code == grpc.StatusCode.OK, "%s: stream OK (%s %s)" % (case, r.code, r.details))
        check(got == want, "%s: greedy %s == golden %s" % (case, got, want))
        if ran is not None:
            rw = [int(x) for x in ran.get(case + "/greedy")]
            check(got == rw, "%s: greedy == mmgw-run's %s" % (case, rw))
        cp = r.completes.get(0)
        check(cp is not None and cp.prompt_tokens == len(gd.get(case + "/ids")) and
              cp.completion_tokens == len(want) and cp.finish_reason == "length", "%s: complete/usage" % case)

    # BF16 media (the default the gateway sends): equal to mmgw-run fed the same values rounded to BF16
    print("BF16 pixel values vs mmgw-run on BF16-rounded pixels", flush=True)
    ev = {}
    for case in ["image", "video"]:
        for k in gd.names():
            if k.startswith(case + "/") and k.split("/")[1] in ("ids", "greedy", "image_grid_thw", "video_grid_thw"):
                ev[k] = gd.get(k)
        pk = case + ("/pixel_values" if case == "image" else "/pixel_values_videos")
        ev[pk] = wc.bf16_round(gd.get(pk))
    epath = os.path.join(tmp, "bf16_eval.safetensors")
    wc.write_safetensors(epath, ev)
    ran16, why = run_mmgw_run(args.build, args.model, epath, tmp)
    for case in ["image", "video"]:
        n = len(gd.get(case + "/greedy"))
        r = wc.generate(c.stub, golden_request(c, gd, case, n, dtype="BF16"), timeout=600)
        if ran16 is None:
            check(False, "%s BF16: mmgw-run (%s)" % (case, why))
            continue
        rw = [int(x) for x in ran16.get(case + "/greedy")]
        check(r.tokens.get(0) == rw, "%s BF16: %s == mmgw-run %s" % (case, r.tokens.get(0), rw))
    return gd, solo


def suite_vs_run(c, args, tmp):
    """Random prompts (text, and an image with random pixels) through the worker and through mmgw-run: the
    same greedy tokens. Needs no golden data, so a plain clone runs it on an mmgw-mkdemo checkpoint."""
    print("random prompts vs mmgw-run", flush=True)
    pb2 = c.pb2
    cases, reqs = {}, {}
    for name, n in (("t40", 40), ("t300", 300), ("t1000", 1000)):
        ids = c.prompt(n, n)
        cases[name + "/ids"] = np.array(ids, dtype=np.int32)
        cases[name + "/greedy"] = np.zeros(10, dtype=np.int32)
        reqs[name] = wc.make_request(pb2, c.rid(name), ids, max_new=10)
    ids = c.prompt(60, 5)
    item, px = small_media(c, ids, 7, grid=(1, 4, 6), seed=9)
    cases["img/ids"] = np.array(ids, dtype=np.int32)
    cases["img/greedy"] = np.zeros(10, dtype=np.int32)
    cases["img/pixel_values"] = px
    cases["img/image_grid_thw"] = np.array([[1, 4, 6]], dtype=np.int64)
    reqs["img"] = wc.make_request(pb2, c.rid("img"), ids, max_new=10, media=[item])
    epath = os.path.join(tmp, "random_eval.safetensors")
    wc.write_safetensors(epath, cases)
    ran, why = run_mmgw_run(args.build, args.model, epath, tmp)
    if ran is None:
        check(False, "mmgw-run on random prompts (%s)" % why)
        return
    for name, req in reqs.items():
        r = wc.generate(c.stub, req)
        want = [int(x) for x in ran.get(name + "/greedy")]
        check(r.code == grpc.StatusCode.OK and r.tokens.get(0) == want, "%s: worker %s == mmgw-run %s" %
              (name, r.tokens.get(0), want))


# ---------------------------------------------------------------------------------------------------------
# protocol checks (every target)

def small_media(c, ids, at, dtype="F32", grid=(1, 2, 2), seed=0):
    """One image of `grid` with its placeholder run written into ids at `at` (ids changed in place)."""
    pb2 = c.pb2
    t, h, w = grid
    rows = t * h * w
    ntok = rows // 4
    for p in range(at, at + ntok):
        ids[p] = c.img
    px = np.random.default_rng(seed).standard_normal((rows, c.row_len)).astype(np.float32)
    item = pb2.MultimodalItem(modality=pb2.IMAGE, pixel_values=wc.tensor(pb2, px, dtype), grid_thw=[t, h, w],
                              placeholders=[pb2.PlaceholderRange(offset=at, length=ntok)])
    return item, px


def suite_concurrency(c, gd):
    print("16 concurrent streams vs their solo results", flush=True)
    specs = []
    for i in range(16):
        if gd is not None and i % 4 == 0:
            case = GOLDEN_CASES[(i // 4) % len(GOLDEN_CASES)]
            specs.append(("golden", case, 6 + i))
        else:
            specs.append(("text", c.prompt(8 + (37 * i) % max(8, min(c.pool_tokens // 4, 600)), 1000 + i), 10 + i))

    def request(i):
        kind, what, n = specs[i]
        if kind == "golden":
            return golden_request(c, gd, what, n, rid=c.rid("cc%d" % i))
        return wc.make_request(c.pb2, c.rid("cc%d" % i), what, max_new=n)

    solo = [wc.generate(c.stub, request(i)) for i in range(16)]
    conc = wc.run_threads([lambda i=i: wc.generate(c.stub, request(i)) for i in range(16)])
    same = 0
    for i in range(16):
        ok = (conc[i].code == grpc.StatusCode.OK and solo[i].code == grpc.StatusCode.OK and
              conc[i].tokens.get(0) == solo[i].tokens.get(0) and len(solo[i].tokens.get(0, [])) == specs[i][2])
        same += ok
        if not ok:
            print("    stream %d: solo %s %s, concurrent %s %s %r" % (i, solo[i].code, solo[i].tokens.get(0),
                                                                    conc[i].code, conc[i].tokens.get(0),
                                                                    getattr(conc[i], "details", "")))
    check(same == 16, "16 concurrent streams equal their solo runs (%d/16)" % same)
    check(all(r.order_ok for r in conc), "no chunk after its choice's complete")


def suite_features(c):
    print("n > 1, logprobs, prefix reuse, usage", flush=True)
    ids = c.prompt(70, 7)
    solo = c.gen(ids, 9)
    r = c.gen(ids, 9, n=3)
    check(r.code == grpc.StatusCode.OK and sorted(r.completes) == [0, 1, 2], "n=3: three completes")
    check(all(r.tokens.get(i) == solo.tokens.get(0) for i in range(3)), "n=3 greedy: every choice == solo")
    bs = c.info.block_size
    check(r.completes[0].cached_tokens == ((len(ids) - 1) // bs) * bs,
          "prefix reuse: cached_tokens %d == full pages of the prompt %d" %
          (r.completes[0].cached_tokens, ((len(ids) - 1) // bs) * bs))
    r = c.gen(ids, 4, return_logprobs=True, logprobs=3)
    lp = r.logprobs.get(0, [])
    top = r.top.get(0, [])
    check(len(lp) == 4 and all(x <= 0.0 for x in lp), "logprobs: one per token, <= 0")
    check(len(top) == 4 and all(len(t) == 3 for t in top), "top_logprobs: 3 per token")
    check(all(t[0][0] == tok and abs(t[0][1] - l) < 1e-4 and t[0][1] >= t[1][1] >= t[2][1]
              for t, tok, l in zip(top, r.tokens.get(0, []), lp)), "greedy token is top-1, entries descending")
    # sampling with a seed is reproducible
    a = c.gen(ids, 12, temperature=1.0, seed=1234)
    b = c.gen(ids, 12, temperature=1.0, seed=1234)
    check(a.tokens.get(0) == b.tokens.get(0) and len(a.tokens.get(0, [])) == 12, "seeded sampling reproducible")
    # max_new_tokens 0: usage only
    r = c.gen(ids, 0)
    check(r.code == grpc.StatusCode.OK and r.completes.get(0) is not None and r.completes[0].completion_tokens == 0,
          "max_new_tokens 0: a Complete with no tokens")


def wait_free(c, want, timeout=5.0):
    end = time.time() + timeout
    ld = c.load()
    while time.time() < end and not (ld.free_kv_pages == want and ld.running_requests == 0):
        time.sleep(0.02)
        ld = c.load()
    return ld


def suite_abort(c):
    pb2 = c.pb2
    print("Abort and client cancel free the pages", flush=True)
    base = c.load()
    check(base.total_kv_pages > 0 and base.page_tokens == c.info.block_size, "Load: pages and page size")
    ids = c.prompt(100, 11)
    long_new = c.long_new(len(ids))
    rid = c.rid("abort")
    req = wc.make_request(pb2, rid, ids, max_new=long_new)
    got5 = threading.Event()
    box = {}

    def run():
        box["r"] = wc.generate(c.stub, req, on_chunk=lambda r: r.chunks >= 5 and got5.set())

    th = threading.Thread(target=run)
    th.start()
    check(got5.wait(120), "abort: stream started")
    mid = c.load()
    check(mid.running_requests == 1 and mid.free_kv_pages < base.free_kv_pages,
          "Load mid-stream: 1 running, %d free < %d" % (mid.free_kv_pages, base.free_kv_pages))
    ar = c.stub.Abort(pb2.AbortRequest(request_id=rid), timeout=30)
    after = c.load()  # the Abort reply comes after the pages are freed
    th.join(60)
    r = box.get("r")
    check(ar.found, "Abort found the request")
    check(after.free_kv_pages == base.free_kv_pages and after.running_requests == 0,
          "Load right after Abort: free %d == %d before, 0 running" % (after.free_kv_pages, base.free_kv_pages))
    check(r is not None and r.code == grpc.StatusCode.CANCELLED, "aborted stream ends CANCELLED (%s)" %
          (r.code if r else None))
    check(r is not None and r.completes.get(0) is not None and r.completes[0].finish_reason == "abort" and
          len(r.tokens.get(0, [])) < long_new, "aborted stream: Complete 'abort' before the end")
    check(not c.stub.Abort(pb2.AbortRequest(request_id="no-such"), timeout=30).found, "Abort of unknown id")

    # a client that goes away
    holder = []
    got5 = threading.Event()
    req = wc.make_request(pb2, c.rid("gone"), ids, max_new=long_new)
    th = threading.Thread(target=lambda: wc.generate(c.stub, req, call_holder=holder,
                                                      on_chunk=lambda r: r.chunks >= 5 and got5.set()))
    th.start()
    check(got5.wait(120), "cancel: stream started")
    holder[0].cancel()
    th.join(60)
    ld = wait_free(c, base.free_kv_pages)
    check(ld.free_kv_pages == base.free_kv_pages and ld.running_requests == 0,
          "client cancel frees the pages (free %d, running %d)" % (ld.free_kv_pages, ld.running_requests))


def expect_code(c, req, code, what):
    r = wc.generate(c.stub, req, timeout=120)
    ok = check(r.code == code, "%s -> %s (%s: %s)" % (what, code.name, r.code.name if r.code else None, r.details))
    return ok


def suite_errors(c):
    pb2 = c.pb2
    print("malformed requests get their status code, and the worker keeps serving", flush=True)
    I = grpc.StatusCode.INVALID_ARGUMENT
    ids = c.prompt(30, 21)
    good = c.gen(ids, 5)

    def mk(ids_, **kw):
        return wc.make_request(pb2, c.rid("bad"), ids_, max_new=kw.pop("max_new", 5), **kw)

    expect_code(c, mk([]), I, "empty input_ids")
    expect_code(c, mk(ids[:5] + [c.vocab]), I, "id == vocab_size")
    expect_code(c, mk(ids[:5] + [2 ** 32 - 1]), I, "id 2^32-1")
    if c.ctx <= 600000:
        expect_code(c, mk([ids[0]] * int(c.ctx)), I, "prompt as long as the context (%d)" % c.ctx)
    else:
        skip("prompt longer than the context: context %d too large to send" % c.ctx)
    expect_code(c, mk(ids, n=65), I, "n = 65")
    strict = c.target != "toy"  # the toy checks bytes and placeholders, not every sampling value or grid
    if strict:
        expect_code(c, mk(ids, temperature=-1.0), I, "temperature -1")
    # media
    mids = list(ids)
    item, px = small_media(c, mids, 5)
    bad = pb2.MultimodalItem()
    bad.CopyFrom(item)
    bad.pixel_values.data = bad.pixel_values.data[:-4]
    expect_code(c, mk(mids, media=[bad]), I, "tensor bytes shorter than shape x dtype")
    bad.CopyFrom(item)
    bad.pixel_values.dtype = pb2.BF16
    expect_code(c, mk(mids, media=[bad]), I, "F32 bytes labelled BF16")
    bad.CopyFrom(item)
    bad.pixel_values.dtype = pb2.DTYPE_UNSPECIFIED
    expect_code(c, mk(mids, media=[bad]), I, "unspecified dtype")
    bad.CopyFrom(item)
    bad.placeholders[0].offset = 10
    expect_code(c, mk(mids, media=[bad]), I, "placeholder run on text tokens")
    if strict:
        bad.CopyFrom(item)
        bad.placeholders[0].length = 2
        expect_code(c, mk(mids, media=[bad]), I, "placeholder run longer than the grid's tokens")
        bad.CopyFrom(item)
        del bad.grid_thw[:]
        bad.grid_thw.extend([1, 4, 4])
        expect_code(c, mk(mids, media=[bad]), I, "grid that does not match the rows")
        expect_code(c, mk(mids), I, "image token with no mm_input")
        two = list(mids)
        two[20] = c.img
        expect_code(c, mk(two, media=[item]), I, "a second image token no run covers")
    # a live duplicate request_id
    rid = c.rid("dup")
    long_new = c.long_new(len(ids))
    th, started, box = stream_in_background(c, wc.make_request(pb2, rid, ids, max_new=long_new))
    started.wait(120)
    expect_code(c, wc.make_request(pb2, rid, ids, max_new=3), I, "request_id of a live request")
    c.stub.Abort(pb2.AbortRequest(request_id=rid), timeout=30)
    th.join(60)
    # more pages than the whole pool holds: suite_context_cache (its own worker, with a small cache)
    # bytes that are no GenerateRequest (grpcio servers say INTERNAL), and a method the worker does not have
    raw = c.w.channel.unary_stream("/mmgw.worker.v1.Worker/Generate")
    try:
        list(raw(b"\xff\xff\xff\x0f garbage", timeout=30))
        check(False, "garbage request bytes refused")
    except grpc.RpcError as e:
        want = I if strict else grpc.StatusCode.INTERNAL
        check(e.code() == want, "garbage request bytes -> %s (%s)" % (want.name, e.code().name))
    if strict:
        try:
            c.w.channel.unary_unary("/mmgw.worker.v1.Worker/NoSuchMethod")(b"", timeout=30)
            check(False, "unknown method refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNIMPLEMENTED, "unknown method -> UNIMPLEMENTED (%s)" % e.code().name)
    # still serving, same answer as before
    again = c.gen(ids, 5)
    check(again.code == grpc.StatusCode.OK and again.tokens.get(0) == good.tokens.get(0),
          "still serving after the errors, same tokens")
    # media accepted when well-formed, in every dtype; F16 and BF16 agree with F32 on this model?
    for dt in ("F32", "BF16", "F16"):
        it, _ = small_media(c, list(ids), 5, dtype=dt)
        r = wc.generate(c.stub, mk(mids, media=[it]))
        check(r.code == grpc.StatusCode.OK and len(r.tokens.get(0, [])) == 5, "well-formed %s image accepted" % dt)


def suite_uploads(c):
    pb2 = c.pb2
    print("UploadTensor and shared memory give the same tokens as inline bytes", flush=True)
    ids = c.prompt(40, 31)
    item, px = small_media(c, ids, 3, grid=(1, 4, 4), seed=5)
    inline = wc.generate(c.stub, wc.make_request(pb2, c.rid("inl"), ids, max_new=6, media=[item]))
    check(inline.code == grpc.StatusCode.OK, "inline media request OK (%s)" % inline.details)
    data = item.pixel_values.data
    uid = "up-" + uuid.uuid4().hex[:8]
    step = max(1, len(data) // 5)

    def chunks():
        for off in range(0, len(data), step):
            yield pb2.TensorChunk(upload_id=uid, total_bytes=len(data) if off == 0 else 0, offset=off,
                                  data=data[off:off + step])

    ur = c.stub.UploadTensor(chunks(), timeout=60)
    check(ur.upload_id == uid and ur.received_bytes == len(data), "UploadTensor received %d bytes" % ur.received_bytes)
    it2 = pb2.MultimodalItem()
    it2.CopyFrom(item)
    it2.pixel_values.data = b""
    it2.pixel_values.upload_id = uid
    r = wc.generate(c.stub, wc.make_request(pb2, c.rid("upl"), ids, max_new=6, media=[it2]))
    if c.target == "toy":
        check(r.code == grpc.StatusCode.OK, "toy: upload_id accepted")
        return
    check(r.code == grpc.StatusCode.OK and r.tokens.get(0) == inline.tokens.get(0), "upload_id: same tokens")
    r = wc.generate(c.stub, wc.make_request(pb2, c.rid("upl2"), ids, max_new=6, media=[it2]))
    check(r.code != grpc.StatusCode.OK, "an upload is used once (%s)" % r.code)
    bad = iter([pb2.TensorChunk(upload_id="x" + uid, total_bytes=10, offset=0, data=b"12345"),
                pb2.TensorChunk(upload_id="x" + uid, offset=7, data=b"12")])
    try:
        c.stub.UploadTensor(bad, timeout=30)
        check(False, "out-of-order chunk refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, "out-of-order chunk -> INVALID_ARGUMENT")
    if not c.info.supports_shm:
        skip("shared memory: the worker does not offer it")
        return
    name = "/mmgw-test-" + uuid.uuid4().hex[:10]
    path = "/dev/shm" + name
    key = os.urandom(16)  # the object starts with it; the request must name it (SharedMemoryRef.key)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(key + b"\0" * 48 + data)
    try:
        it3 = pb2.MultimodalItem()
        it3.CopyFrom(item)
        it3.pixel_values.data = b""
        it3.pixel_values.shm.name = name
        it3.pixel_values.shm.offset = 64
        it3.pixel_values.shm.length = len(data)
        expect_code(c, wc.make_request(pb2, c.rid("shm0"), ids, max_new=6, media=[it3]),
                    grpc.StatusCode.NOT_FOUND, "shm without the key")
        it3.pixel_values.shm.key = key
        r = wc.generate(c.stub, wc.make_request(pb2, c.rid("shm"), ids, max_new=6, media=[it3]))
        check(r.code == grpc.StatusCode.OK and r.tokens.get(0) == inline.tokens.get(0), "shm: same tokens")
        it3.pixel_values.shm.length = len(data) + 64
        expect_code(c, wc.make_request(pb2, c.rid("shm2"), ids, max_new=6, media=[it3]),
                    grpc.StatusCode.INVALID_ARGUMENT, "shm length not matching shape")
    finally:
        os.unlink(path)


def stream_in_background(c, req):
    """Generate req on a thread of its own: (thread, event set at the first chunk, box["r"] the result)."""
    started = threading.Event()
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", wc.generate(
        c.stub, req, on_chunk=lambda r: started.set())))
    th.start()
    return th, started, box


def suite_drain(c, w):
    pb2 = c.pb2
    print("SIGTERM drains: running streams finish, new calls are refused, exit 0", flush=True)
    ids = c.prompt(50, 41)
    n = c.long_new(len(ids), 300) if c.target != "toy" else 100
    th, started, box = stream_in_background(c, wc.make_request(pb2, c.rid("drain"), ids, max_new=n))
    check(started.wait(120), "drain: stream started")
    w.signal(signal.SIGTERM)
    time.sleep(0.3)
    late = None
    try:
        ch2 = grpc.insecure_channel("127.0.0.1:%d" % w.port)
        stub2 = wc.gen_stubs()[1].WorkerStub(ch2)
        late = wc.generate(stub2, wc.make_request(pb2, c.rid("late"), ids, max_new=3), timeout=10)
        ch2.close()
    except Exception as e:  # noqa: BLE001
        print("    late call raised %r" % e)
    th.join(120)
    r = box.get("r")
    check(r is not None and r.code == grpc.StatusCode.OK and len(r.tokens.get(0, [])) == n,
          "the running stream finished (%s %r, %d tokens)" % (r.code if r else None, getattr(r, "details", "") if r else "",
                                                             len(r.tokens.get(0, [])) if r else 0))
    check(late is not None and late.code != grpc.StatusCode.OK, "a call after SIGTERM is refused (%s)" %
          (late.code if late else None))
    try:
        rc = w.wait_exit(60)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, "worker exited 0 (%s)" % rc)


def suite_drain_twice(args, pb2):
    """A second SIGTERM during the drain ends the running streams at once, each with its Complete "abort" and
    UNAVAILABLE, and the worker still exits 0. (It used to reach an OpenBLAS thread started before main
    blocked the signals, whose default action killed the worker: exit -15, streams cut without a status.)"""
    print("a second SIGTERM cuts the drain short: streams end UNAVAILABLE, exit 0", flush=True)
    argv, env = worker_argv(args, ["--drain-timeout", "300", "--cache-pages", "4096"])  # a long stream
    w = wc.WorkerProc(argv, env=env).wait_ready()
    try:
        c = Ctx(args.target, w, pb2)
        ids = c.prompt(20, 61)
        n = c.long_new(len(ids), 100000)
        th, started, box = stream_in_background(c, wc.make_request(pb2, c.rid("drain2"), ids, max_new=n))
        check(started.wait(120), "drain twice: stream started")
        w.signal(signal.SIGTERM)
        time.sleep(0.5)
        w.signal(signal.SIGTERM)
        th.join(60)
        r = box.get("r")
        check(r is not None and r.code == grpc.StatusCode.UNAVAILABLE and "shutting down" in r.details and
              r.completes.get(0) is not None and r.completes[0].finish_reason == "abort",
              "drain twice: the stream ended with Complete abort and UNAVAILABLE (%s %r)" %
              (r.code if r else None, r.details if r else ""))
        try:
            rc = w.wait_exit(30)
        except subprocess.TimeoutExpired:
            rc = None
        check(rc == 0, "drain twice: worker exited 0 (%s)" % rc)
    finally:
        w.stop()


def suite_bad_port_file(args):
    """A --port-file that cannot be written ends the worker with an error (exit 1): it used to log a warning and
    serve on, so whoever waited for the file (with --listen HOST:0 the only way to learn the port) waited
    forever."""
    print("an unwritable --port-file is an error: exit 1", flush=True)
    argv, env = worker_argv(args, ["--listen", "127.0.0.1:0", "--port-file", "/nonexistent-mmgw-dir/port"])
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    text = out.decode("utf-8", "replace")
    check(p.returncode == 1 and "port file" in text, "bad port file: exit 1 with a message (%s: %s)" %
          (p.returncode, text.strip().splitlines()[-1:] if text.strip() else ""))


def suite_queue(args, pb2):
    """A worker with one sequence and a queue of one: the third concurrent request is refused."""
    print("queue bound -> RESOURCE_EXHAUSTED", flush=True)
    argv, env = worker_argv(args, ["--max-seqs", "1", "--max-queue", "1"])
    w = wc.WorkerProc(argv, env=env).wait_ready()
    try:
        c = Ctx(args.target, w, pb2)
        ids = c.prompt(20, 51)
        long_new = c.long_new(len(ids), 2000)
        rids = [c.rid("q%d" % i) for i in range(3)]
        started = threading.Event()
        res = {}

        def run(i):
            res[i] = wc.generate(c.stub, wc.make_request(pb2, rids[i], ids, max_new=long_new),
                                 on_chunk=lambda r: started.set())

        t0 = threading.Thread(target=run, args=(0,))
        t0.start()
        started.wait(120)
        t1 = threading.Thread(target=run, args=(1,))
        t1.start()
        end = time.time() + 10
        while time.time() < end and c.load().waiting_requests < 1:
            time.sleep(0.02)
        check(c.load().waiting_requests == 1, "second request waits")
        run(2)
        check(res[2].code == grpc.StatusCode.RESOURCE_EXHAUSTED, "third request -> RESOURCE_EXHAUSTED (%s: %s)" %
              (res[2].code, res[2].details))
        for rid in rids[:2]:
            c.stub.Abort(pb2.AbortRequest(request_id=rid), timeout=30)
        t0.join(60)
        t1.join(60)
        check(res[1].code == grpc.StatusCode.CANCELLED, "a waiting request can be aborted too")
    finally:
        w.stop()


def suite_port_file_link(args):
    """A --port-file that is a symbolic link gets the port in its target; the link stays a link (the worker
    used to rename a temporary file over it)."""
    print("a --port-file through a symbolic link writes its target", flush=True)
    d = tempfile.mkdtemp(prefix="mmgw-portlink-")
    os.mkdir(os.path.join(d, "sub"))
    link, target = os.path.join(d, "port"), os.path.join(d, "sub", "port.txt")
    os.symlink("sub/port.txt", link)
    argv, env = worker_argv(args)
    w = wc.WorkerProc(argv, env=env, port_file=link)  # the port is read through the link
    try:
        w.wait_ready()
        port = open(target).read().strip() if os.path.exists(target) else ""
        check(port.isdigit() and int(port) == w.port and os.path.islink(link),
              "port %r in the link's target, the link still a link (%s)" % (port, os.path.islink(link)))
    finally:
        w.stop()


def suite_context_cache(args, pb2):
    """A worker whose cache (16 pages) holds less than the model's context. It advertises the cache as its
    context and admits every prompt shorter than that, max_new_tokens set or not (an unset one used to reserve
    256 tokens past the prompt, over the pool: RESOURCE_EXHAUSTED); what can never fit the whole pool, n
    choices of a long prompt, is INVALID_ARGUMENT (a 400 at the gateway), not RESOURCE_EXHAUSTED (a 429 that
    invites retries that cannot succeed); a request that only has to wait for pages still waits and runs."""
    print("a cache smaller than the context: advertised, filled, and never-fitting requests -> INVALID_ARGUMENT",
          flush=True)
    argv, env = worker_argv(args, ["--cache-pages", "16"])
    w = wc.WorkerProc(argv, env=env).wait_ready()
    I = grpc.StatusCode.INVALID_ARGUMENT
    try:
        c = Ctx(args.target, w, pb2)
        bs = c.info.block_size
        check(c.pool_tokens == 16 * bs and c.ctx == c.pool_tokens,
              "ModelInfo: max_context %d == the pool's 16 x %d tokens" % (c.ctx, bs))
        full = (c.prompt(c.ctx + 16, 61))[:c.ctx - 1]
        for max_new in (None, 5):
            r = c.gen(full, max_new)
            done = r.completes.get(0)
            check(r.code == grpc.StatusCode.OK and len(r.tokens.get(0, [])) == 1 and done is not None and
                  done.finish_reason == "length",
                  "a prompt of max_context - 1 tokens, max_new_tokens %s: OK, 1 token, length (%s %s)" %
                  (max_new, r.code, r.details))
        r = c.gen(full + [full[0]], None)
        check(r.code == I, "a prompt of max_context tokens -> INVALID_ARGUMENT (%s %s)" % (r.code, r.details))
        r = c.gen(full, None, n=2)
        check(r.code == I and "cache" in r.details,
              "2 choices of that prompt (the pool + a copied page) -> INVALID_ARGUMENT (%s %s)" % (r.code, r.details))
        half = full[:c.ctx // 2]
        r = c.gen(half, c.ctx - len(half) - 1, n=2)
        check(r.code == I and "cache" in r.details,
              "2 choices of %d + %d tokens -> INVALID_ARGUMENT (%s %s)" % (len(half), c.ctx - len(half) - 1,
                                                                         r.code, r.details))
        # two requests of 10 pages each on 16: the second waits for the first's pages, then runs
        p10 = full[:9 * bs]
        res = wc.run_threads([lambda i=i: c.gen(p10[i:] + p10[:i], bs - 1) for i in range(2)])
        check(all(r.code == grpc.StatusCode.OK and len(r.tokens.get(0, [])) == bs - 1 for r in res),
              "two requests that do not fit together both run (%s)" % [(r.code, r.details) for r in res])
        ld = c.load()
        check(ld.free_kv_pages == 16 and ld.running_requests == 0, "every page back (free %d)" % ld.free_kv_pages)
    finally:
        w.stop()


def worker_argv(args, extra=()):
    env = dict(os.environ)
    if args.target == "toy":
        toy = os.path.join(wc.SRC, "tests", "toy_worker", "toy_worker.py")
        argv = ["/usr/bin/python3", toy, "--rate", "200", "--vocab", "8199", "--max-context", "4096"]
        return argv, env
    argv = [args.binary, "--model", args.model, "--threads", str(args.threads)] + list(args.worker_args) + list(extra)
    if args.target == "fake":
        env["FAKE_ENGINE_DELAY_US"] = "2000"  # slow enough to act mid-stream
    return argv, env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", choices=["real", "fake", "toy"], required=True)
    ap.add_argument("--binary")
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker-args", nargs="*", default=[])
    args = ap.parse_args()
    args.build = os.environ.get("MMGW_BUILD", os.path.join(wc.SRC, "build"))
    tmp = tempfile.mkdtemp(prefix="mmgw-wtest-")
    have_golden = False
    if args.target == "real":
        args.binary = args.binary or os.path.join(args.build, "bin", "mmgw-worker")
        if not os.path.exists(args.binary):
            print("SKIP: %s is not built (the model runtime wk_runtime is missing)" % args.binary)
            return 77
        td = os.environ.get("MMGW_TESTDATA", "")
        gm = os.path.join(td, "m3-tiny-a")
        if not args.model and os.path.exists(os.path.join(gm, "goldens.safetensors")):
            args.model, have_golden = gm, True
        elif not args.model:
            mk = os.path.join(args.build, "bin", "mmgw-mkdemo")
            if not os.path.exists(mk):
                print("SKIP: no golden data (MMGW_TESTDATA) and no mmgw-mkdemo to make a checkpoint")
                return 77
            args.model = os.path.join(tmp, "demo")
            subprocess.run([mk, "--out", args.model], check=True)
            skip("golden comparisons: no golden data (../shared/testdata); running on an mmgw-mkdemo checkpoint")
        args.worker_args = ["--cache-pages", "4096"] + list(args.worker_args)
    elif args.target == "fake":
        if not args.binary or not os.path.exists(args.binary):
            print("SKIP: the fake worker binary is not built")
            return 77
        args.model = tmp
        args.worker_args = ["--cache-pages", "64"] + list(args.worker_args)
    pb2, _ = wc.gen_stubs()
    argv, env = worker_argv(args)
    w = wc.WorkerProc(argv, env=env).wait_ready()
    try:
        c = Ctx(args.target, w, pb2)
        print("%s worker: model %s, vocab %d, context %d, block %d" % (args.target, c.info.model_name, c.vocab, c.ctx,
                                                                       c.info.block_size), flush=True)
        check(c.info.protocol_version == 1, "ModelInfo: protocol_version 1")
        if args.target != "toy":  # a prompt past the pool can never be admitted: the advertised context fits it
            check(0 < c.ctx <= c.pool_tokens, "ModelInfo: max_context %d fits the cache pool (%d tokens)"
                  % (c.ctx, c.pool_tokens))
        check(w.stub.Health(pb2.HealthRequest(), timeout=10).healthy, "Health: healthy")
        gd = None
        if have_golden:
            gd, _ = suite_golden(c, args, tmp)
        if args.target == "real":
            suite_vs_run(c, args, tmp)
        suite_concurrency(c, gd)
        if args.target != "toy":  # the toy's choices differ by design and it caches nothing
            suite_features(c)
        suite_abort(c)
        suite_errors(c)
        suite_uploads(c)
        suite_drain(c, w)
    except Exception:
        print(w.log_text())
        raise
    finally:
        w.stop()
    if args.target != "toy":  # the toy has no queue
        suite_queue(args, pb2)
        suite_context_cache(args, pb2)
        suite_drain_twice(args, pb2)
        suite_bad_port_file(args)
        suite_port_file_link(args)
    if FAILS:
        print("\nworker log tail:\n" + w.log_text()[-3000:])
        print("FAILED %d checks:\n  %s" % (len(FAILS), "\n  ".join(FAILS)))
        return 1
    print("all checks passed%s" % (" (skipped: %s)" % "; ".join(SKIPS) if SKIPS else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
