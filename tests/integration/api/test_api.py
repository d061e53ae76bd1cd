#!/usr/bin/python3
"""Integration tests of the OpenAI API (gateway/api) with real processes on loopback.

Usage: test_api.py CASE   (exit 0 pass, 1 fail, 77 skipped with a reason)

  golden_h1     greedy completions equal the golden greedy tokens for every m3-tiny-a case (text from ids; image,
                multi and video through multi_modal_data and the whole media pipeline), HTTP/1.1
  golden_h2     the same over HTTP/2: cleartext prior knowledge and TLS (ALPN h2, certificate made here)
  tokenize      /tokenize equals tokenizer/goldens.json; /detokenize gives the decoded text back
  media_tokens  a streamed image chat costs exactly t*h*w/4 + 2 tokens more than the same text; a video chat
                (h*w/4 + 2 + its timestamp text) per temporal group
  errors        every error class: 400 (JSON, fields, media, context), 404, 405, 413, 429, 503 (with retry-after,
                HTTP/1.1 and h2c); one UTF-8 BOM before a JSON body is accepted on every JSON endpoint
  toy           the Python toy worker behind the gateway: chat, completions, streaming, n, stop strings,
                stop_token_ids, logprobs
  qwen2vl       the Qwen2-VL plugin behind the gateway (template, stop token, image pads) with the toy worker
  parse         a scripted worker: reasoning_content, tool_calls (streamed and not), finish_reason tool_calls,
                thinking_mode, stop strings, worker failures before and after the first token, choices the worker
                ends "abort" or never ends (503 / the error event), eos and stop ids at the max_model_len bound
  robust        400 random and malformed requests (every answer a 2xx or an OpenAI error), 40 concurrent streams
                of which half are cut by their client
  disconnect    a client that goes away mid-stream aborts the worker request (the worker's Load shows it)
  media_time    preprocess_timeout: a few-KiB video that takes seconds to preprocess fails within the budget (400
                naming the part); a client that goes away (HTTP/1.1 and h2) stops its preprocessing job, so the
                only pool thread serves the next request at once
  failover      two workers behind one model, one killed: requests still succeed
  backpressure  a client that does not read: the gateway pauses the worker stream instead of buffering
  reload        SIGHUP adds a model while a stream runs; the stream completes on the old generation
  metrics       /metrics has the API families with the requests just made
  surface       GET /v1/models/{id}, the parameter of tool-definition errors, media errors naming their part once,
                completions' text_offset (streamed and not)
  conftest      mmgw -t: model and media errors name the file and line of the directive at fault
  demo          without ../shared: mmgw-mkdemo + mmgw-mktokenizer + the real worker, chat with an image by
                data: URL and by http URL (fetched from a loopback server the config allows)
"""
import http.client
import json
import os
import random
import signal
import socket
import struct
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_fixture import *  # noqa: E402,F401,F403
import api_fixture as fx  # noqa: E402

M3_TOK = os.path.join(fx.TESTDATA, "m3-tiny-a", "tokenizer.json")
M3_DIR = os.path.join(fx.TESTDATA, "m3-tiny-a")
MEDIA = os.path.join(fx.TESTDATA, "media")


def demo_tokenizer(d):
    """A byte-level M3-style tokenizer made by mmgw-mktokenizer; returns (path, {token: id})."""
    fx.need_file(fx.MKTOK, "mmgw-mktokenizer")
    path = os.path.join(d, "tokenizer.json")
    subprocess.run([fx.MKTOK, "--out", path], check=True, capture_output=True, timeout=60)
    with open(path) as f:
        t = json.load(f)
    ids = {a["content"]: a["id"] for a in t["added_tokens"]}
    vocab = max([a["id"] for a in t["added_tokens"]] + list(t["model"]["vocab"].values())) + 1
    return path, ids, vocab


def toy_setup(d, *toy_args, models_extra="", media="", n_workers=1, http_extra="", model_name="toy"):
    tok, ids, vocab = demo_tokenizer(d)
    workers = [fx.ToyWorker("--vocab", str(vocab), "--image-token", str(ids["]<]image[>["]), "--video-token",
                            str(ids["]<]video[>["]), *toy_args) for _ in range(n_workers)]
    gw = fx.Gateway(fx.model_block(model_name, "m3", tok, [w.addr for w in workers],
                                   "health_check_interval 200ms;\n    health_check_timeout 1s;\n    " + models_extra),
                    media=media, http_extra=http_extra)
    return gw, workers, ids


def tokenize(gw, text, model=None):
    body = {"prompt": text, "add_special_tokens": False}
    if model:
        body["model"] = model
    st, r = fx.post(gw, "/tokenize", body)
    assert st == 200, r
    return r["tokens"]


def detok(gw, ids):
    st, r = fx.post(gw, "/detokenize", {"tokens": ids})
    assert st == 200, r
    return r["prompt"]


# ---------------------------------------------------------------- golden

def golden_requests(gw):
    """[(case, body, greedy)]: the golden prompts as completions requests."""
    g = fx.goldens()
    img, vid, start, end = (tokenize(gw, t)[0] for t in
                            ("]<]image[>[", "]<]video[>[", "]<]start of image[>[", "]<]end of image[>["))
    out = []
    for case in ("text_short", "text_sparse", "long", "image", "multi", "video"):
        ids, greedy = g[case]["ids"], g[case]["greedy"]
        body = {"model": "m3-tiny", "max_tokens": len(greedy), "temperature": 0, "logprobs": 0,
                "return_tokens_as_token_ids": True}
        if case == "video":
            s = ids.index(start)
            e = len(ids) - 1 - ids[::-1].index(end)
            fi = g["video"]["frame_indices"]
            ts = tokenize(gw, "]<]%.1f seconds[>[" % (fi[0] / 30.0))  # the clip is 30 fps (media/videos.json)
            if not fx.check(ids[s - len(ts):s] == ts, "video golden: the first timestamp tokenizes as the reference"):
                continue
            body["prompt"] = ids[:s - len(ts)] + [vid] + ids[e + 1:]
            body["multi_modal_data"] = {"video": [fx.data_url(os.path.join(MEDIA, "pan_640x360_30fps.mp4"))]}
        elif case in ("image", "multi"):
            p, i = [], 0
            while i < len(ids):
                if ids[i] == start:
                    i = ids.index(end, i) + 1
                    p.append(img)
                else:
                    p.append(ids[i])
                    i += 1
            files = ["chelsea.webp"] + (["tiny_18x11.png"] if case == "multi" else [])
            body["prompt"] = p
            body["multi_modal_data"] = {"image": [fx.data_url(os.path.join(MEDIA, f)) for f in files]}
        else:
            body["prompt"] = ids
        out.append((case, body, greedy, len(ids)))
    return out


def check_golden(case, status, r, greedy, n_prompt, how):
    if not fx.check(status == 200, f"{case} {how}: status {status}: {str(r)[:300]}"):
        return
    got = [int(t.split(":")[1]) for t in r["choices"][0]["logprobs"]["tokens"]]
    fx.check(got == greedy, f"{case} {how}: greedy {got} != golden {greedy}")
    fx.check(r["usage"]["prompt_tokens"] == n_prompt,
             f"{case} {how}: prompt_tokens {r['usage']['prompt_tokens']} != golden prompt length {n_prompt}")
    fx.check(r["usage"]["completion_tokens"] == len(greedy), f"{case} {how}: completion_tokens")


def golden_gateway(listens=("127.0.0.1:0",), http_extra=""):
    fx.need_testdata()
    w = fx.RealWorker(M3_DIR)
    gw = fx.Gateway(fx.model_block("m3-tiny", "m3", M3_TOK, [w.addr]), listens=listens, http_extra=http_extra)
    return w, gw


def case_golden_h1():
    w, gw = golden_gateway()
    for case, body, greedy, n in golden_requests(gw):
        st, r = fx.post(gw, "/v1/completions", body, timeout=300)
        check_golden(case, st, r, greedy, n, "HTTP/1.1")


def case_golden_h2():
    fx.need_testdata()
    d = tempfile.mkdtemp(prefix="mmgw-api-tls-")
    crt, key = fx.make_cert(d)
    w, gw = golden_gateway(listens=("127.0.0.1:0", "127.0.0.1:0 ssl"),
                           http_extra=f"ssl_certificate {crt};\n    ssl_certificate_key {key};")
    for case, body, greedy, n in golden_requests(gw):
        st, ver, r = fx.curl_json(gw.url("/v1/completions", 0), body, "--http2-prior-knowledge", timeout=300)
        fx.check(ver == "2", f"{case}: h2c answered over HTTP/{ver}")
        check_golden(case, st, r, greedy, n, "h2c")
        st, ver, r = fx.curl_json(f"https://localhost:{gw.ports[1]}/v1/completions", body, "--http2", "-k",
                                  "--resolve", f"localhost:{gw.ports[1]}:127.0.0.1", timeout=300)
        fx.check(ver == "2", f"{case}: TLS answered over HTTP/{ver}")
        check_golden(case, st, r, greedy, n, "TLS h2")


def case_tokenize():
    fx.need_testdata()
    with open(os.path.join(fx.TESTDATA, "tokenizer", "goldens.json")) as f:
        gold = json.load(f)
    gw = fx.Gateway(fx.model_block("m3-tiny", "m3", M3_TOK, ["127.0.0.1:1"]))
    for i, g in enumerate(gold):
        st, r = fx.post(gw, "/tokenize", {"model": "m3-tiny", "prompt": g["text"], "add_special_tokens": False})
        fx.check(st == 200 and r["tokens"] == g["ids"] and r["count"] == len(g["ids"]),
                 f"tokenize golden {i} ({g['text'][:30]!r}): {str(r)[:200]}")
        st, r = fx.post(gw, "/detokenize", {"model": "m3-tiny", "tokens": g["ids"]})
        fx.check(st == 200 and r["prompt"] == g["decoded"], f"detokenize golden {i}: {str(r)[:200]}")
    st, r = fx.post(gw, "/tokenize", {"model": "m3-tiny", "prompt": gold[0]["text"], "return_token_strs": True})
    fx.check(st == 200 and len(r.get("token_strs", [])) == len(gold[0]["ids"]), f"token_strs: {r}")
    # a chat through /tokenize: the rendered M3 template starts with ]~!b[ and ends with the generation prompt
    st, r = fx.post(gw, "/tokenize", {"model": "m3-tiny", "messages": [{"role": "user", "content": "Hello"}]})
    fx.check(st == 200 and r["tokens"][0] == tokenize(gw, "]~!b[")[0], f"tokenize messages: {str(r)[:200]}")
    text = detok(gw, r["tokens"]) if st == 200 else ""
    fx.check(text.startswith("]~!b[]~b]system\n") and text.endswith("]~b]user\nHello[e~[\n]~b]ai\n"),
             f"tokenize messages renders the M3 template: {text[-60:]!r}")


# ---------------------------------------------------------------- media token counts

def stream_usage(gw, content, model="m3-tiny"):
    # ignore_eos: a sampled end of text (random demo weights) would end the stream with "stop" instead
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 2, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    st, ev = fx.sse_events(gw, "/v1/chat/completions", body)
    if not fx.check(st == 200 and ev and ev[-1] == "[DONE]", f"stream status {st}: {str(ev)[:300]}"):
        return None
    chunks = [json.loads(e) for e in ev[:-1]]
    fx.check(all(c["object"] == "chat.completion.chunk" for c in chunks), "chunk objects")
    fx.check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "first chunk carries the role")
    fx.check(chunks[-1]["choices"] == [] and chunks[-1]["usage"], "the usage chunk has no choices")
    fx.check(any(c["choices"] and c["choices"][0]["finish_reason"] == "length" for c in chunks), "finish_reason")
    return chunks[-1]["usage"]["prompt_tokens"]


def case_media_tokens():
    w, gw = golden_gateway()
    g = fx.goldens()
    text = [{"type": "text", "text": "Describe this"}]
    base = stream_usage(gw, text)
    t, h, wd = g["image"]["image_grid_thw"]
    with_img = stream_usage(gw, text + [{"type": "image_url", "image_url": {"url": fx.data_url(
        os.path.join(MEDIA, "chelsea.webp"))}}])
    if base is not None and with_img is not None:
        fx.check(with_img - base == t * h * wd // 4 + 2,
                 f"image costs {with_img - base} tokens, expected {t}*{h}*{wd}/4 + 2 = {t * h * wd // 4 + 2}")
    vt, vh, vw = g["video"]["video_grid_thw"]
    fi = g["video"]["frame_indices"]
    ts_tokens = sum(len(tokenize(gw, "]<]%.1f seconds[>[" % (fi[2 * k] / 30.0))) for k in range(vt))
    want = vt * (vh * vw // 4 + 2) + ts_tokens
    with_vid = stream_usage(gw, text + [{"type": "video_url", "video_url": {"url": fx.data_url(
        os.path.join(MEDIA, "pan_640x360_30fps.mp4"))}}])
    if base is not None and with_vid is not None:
        fx.check(with_vid - base == want, f"video costs {with_vid - base} tokens, expected {vt} groups x "
                 f"({vh}*{vw}/4 + 2) + {ts_tokens} timestamp tokens = {want}")
    # vLLM's {"type": "image", "image": URL} spelling counts the same
    alt = stream_usage(gw, text + [{"type": "image", "image": fx.data_url(os.path.join(MEDIA, "chelsea.webp"))}])
    fx.check(alt == with_img, f"{{'type':'image'}} part: {alt} tokens, image_url part: {with_img}")


# ---------------------------------------------------------------- errors

def case_errors():
    d = tempfile.mkdtemp(prefix="mmgw-api-err-")
    stub = fx.MediaServer({"/x.png": b"not an image at all"})
    gw, (toy,), ids = toy_setup(d, "--max-running", "1", "--rate", "50",
                                models_extra="max_model_len 1000;\n    max_media_per_request 2;",
                                media="fetch_max_bytes 2k;\n    max_pixels 10000;",
                                http_extra="client_max_body_size 64k;")
    chat = "/v1/chat/completions"

    def expect(status, body, param=None, contains=None, path=chat, raw=None, what=""):
        st, r = fx.post(gw, path, body, raw=raw)
        fx.check(st == status and fx.is_error(r, param, contains),
                 f"{what or contains}: expected {status} param={param}, got {st}: {str(r)[:300]}")
        return r

    user = lambda content: {"model": "toy", "messages": [{"role": "user", "content": content}], "max_tokens": 4}
    # 400: malformed JSON and fields, each naming the parameter
    expect(400, None, None, "not valid JSON", raw=b'{"model": "toy", "messages": [')
    r = expect(400, None, None, "NUL character", raw=b'{"model": "toy", "messages": [{"role": "user", "content": "a\\u0000"}]}')
    fx.check("not valid JSON" not in r["error"]["message"] and "JSON_ALLOW_NUL" not in r["error"]["message"],
             f"a NUL escape is valid JSON: {r}")
    expect(400, None, None, "JSON object", raw=b'[1, 2]')
    # one UTF-8 byte order mark before the body is ignored (RFC 8259 §8.1) on every JSON endpoint, the chat
    # template's own parse included; a second one is not JSON
    bom = b"\xef\xbb\xbf"
    for path, b in ((chat, user("hi")), ("/v1/completions", {"model": "toy", "prompt": "hi", "max_tokens": 2}),
                    ("/tokenize", {"model": "toy", "prompt": "hi"}), ("/detokenize", {"model": "toy", "tokens": [5]})):
        st, r = fx.post(gw, path, None, raw=bom + json.dumps(b).encode())
        fx.check(st == 200 and not fx.is_error(r), f"BOM before the body of {path}: {st} {str(r)[:300]}")
    expect(400, None, None, "not valid JSON", raw=bom + bom + json.dumps(user("hi")).encode(), what="two BOMs")
    expect(400, None, None, "not valid JSON", raw=bom, what="a BOM alone")
    expect(400, {"model": "toy"}, "messages", "required")
    expect(400, {"model": "toy", "messages": []}, "messages", "non-empty")
    expect(400, dict(user("hi"), temperature=5), "temperature", "between")
    expect(400, dict(user("hi"), top_p="x"), "top_p", "number")
    expect(400, dict(user("hi"), n=0), "n", "between")
    expect(400, dict(user("hi"), max_tokens=-1), "max_tokens", "between")
    expect(400, dict(user("hi"), min_tokens=5), "min_tokens", "must not exceed 'max_tokens'")
    expect(400, dict(user("hi"), max_completion_tokens=2, min_tokens=3), "min_tokens", "max_completion_tokens")
    expect(400, dict(user("hi"), stop=[1]), "stop", "string")
    expect(400, dict(user("hi"), stream_options={"include_usage": True}), "stream_options", "stream")
    expect(400, dict(user("hi"), top_logprobs=3), "top_logprobs", "logprobs")
    expect(400, dict(user("hi"), presence_penalty=0.5), "presence_penalty", "not supported")
    expect(400, dict(user("hi"), tool_choice="required"), "tool_choice", "constrained")
    expect(400, dict(user("hi"), stop_token_ids=[10 ** 6]), "stop_token_ids", "token id")
    expect(400, {"model": "toy", "prompt": [1, 10 ** 6]}, "prompt", "token id", path="/v1/completions")
    expect(400, {"model": "toy", "prompt": ["a", "b"]}, "prompt", "batched", path="/v1/completions")
    expect(400, {"model": "toy", "messages": [{"role": "wizard", "content": "x"}]}, "messages", "role")
    # 400: media, with the reason
    img = lambda url: [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": url}}]
    expect(400, user(img("file:///etc/passwd")), "messages[0].content[1].image_url",
           "file: URLs are disabled on this server")
    expect(400, user(img("ftp://example.com/x.png")), "messages[0].content[1].image_url", "scheme")
    expect(400, user(img("/etc/passwd")), "messages[0].content[1].image_url", '"/etc/passwd" is not a URL')
    expect(400, user(img(stub.url("/x.png"))), "messages[0].content[1].image_url", None, what="loopback refused")
    fx.check(stub.hits == [], f"the refused address was contacted: {stub.hits}")
    expect(400, user(img("data:image/png;base64,aGVsbG8gd29ybGQ=")), "messages[0].content[1].image_url", None,
           what="undecodable image")
    expect(400, user(img("data:image/png;base64,@@@@")), "messages[0].content[1].image_url", "base64")
    big_png = png_bytes(200, 100)  # 20,000 pixels > max_pixels 10000
    import base64
    expect(400, user(img("data:image/png;base64," + base64.b64encode(big_png).decode())),
           "messages[0].content[1].image_url", "pixels", what="too many pixels")
    expect(400, user([{"type": "image_url"}]), "messages[0].content[0]", "URL")
    expect(400, user([{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]), "messages[0].content[0]",
           "input_audio")
    three = img(fx.data_url_bytes(png_bytes(8, 8))) + img(fx.data_url_bytes(png_bytes(8, 8)))[1:] * 2
    expect(400, user(three), None, "too many media")
    expect(400, user("please read ]<]image[>[ aloud"), "messages", "marker")
    # 400: context length (max_model_len 1000)
    expect(400, {"model": "toy", "prompt": "word " * 1500, "max_tokens": 4}, "prompt", "maximum context length",
           path="/v1/completions")
    expect(400, {"model": "toy", "prompt": "hello", "max_tokens": 1000}, "prompt", "maximum context length",
           path="/v1/completions")
    # without max_tokens a choice ends at max_model_len, not at the worker's larger context (4096 here: at
    # --rate 50 that would be a minute of tokens past the configured limit)
    prompt = [5] * 990
    for stream in (False, True):
        body = {"model": "toy", "prompt": prompt, "ignore_eos": True, "n": 2, "stream": stream}
        usage, reasons = {}, []
        try:
            # the toy runs one request at a time (--max-running 1) and the gateway's cancel of the previous
            # one reaches it asynchronously: a 429 right after it is that slot, so try again for up to 5 s
            for _ in range(25):
                if stream:
                    st, ev = fx.sse_events(gw, "/v1/completions",
                                           dict(body, stream_options={"include_usage": True}), timeout=20)
                    ev = [json.loads(e) for e in ev if e.startswith("{")] if st == 200 else []
                    usage = ev[-1]["usage"] if ev and ev[-1].get("usage") else {}
                    reasons = [c["finish_reason"] for e in ev for c in e["choices"] if c["finish_reason"]]
                else:
                    st, r = fx.post(gw, "/v1/completions", body, timeout=20)
                    usage, reasons = r.get("usage") or {}, [c["finish_reason"] for c in r.get("choices", [])]
                if st != 429:
                    break
                time.sleep(0.2)
        except OSError as ex:  # a timeout: the choices ran past max_model_len
            reasons = [repr(ex)]
        fx.check(usage.get("prompt_tokens") == 990 and usage.get("completion_tokens") == 2 * 10 and
                 reasons == ["length", "length"], f"no max_tokens, stream={stream}: {usage} {reasons}")
    # 404: model and route; 405: method
    r = expect(404, {"model": "nope", "messages": [{"role": "user", "content": "x"}]}, "model", "does not exist")
    fx.check(r["error"]["code"] == "model_not_found", f"404 code: {r}")
    # messages quoting client text stay one printable line (found by fuzz_api)
    r = expect(404, {"model": "a\nb\u0001", "messages": [{"role": "user", "content": "x"}]}, "model", "does not exist")
    fx.check(r["error"]["message"] == "The model `a?b?` does not exist.", f"control characters quoted: {r}")
    st, body = fx.get(gw, "/v1/nothing")
    fx.check(st == 404 and fx.is_error(json.loads(body)), f"unknown route: {st} {body[:200]}")
    st, body = fx.get(gw, "/v1/chat/completions")
    fx.check(st == 405 and fx.is_error(json.loads(body)), f"GET on a POST route: {st} {body[:200]}")
    # 413: body over client_max_body_size, media over fetch_max_bytes (2k)
    expect(413, user("x" * 70000), None, None, what="body too large")
    expect(413, user(img(fx.data_url_bytes(os.urandom(4000), "image/png"))), "messages[0].content[1].image_url",
           "bytes", what="media too large")
    # 429: the worker is full (--max-running 1): hold one stream open (its first token read, so the worker
    # is running it whatever the machine's load; 100 tokens at 50/s keep it there), the next is refused
    hc = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    hc.request("POST", chat, json.dumps(dict(user("a b c d e f"), max_tokens=100, stream=True)),
               {"content-type": "application/json"})
    hr = hc.getresponse()
    first = hr.readline() if hr.status == 200 else b""
    fx.check(hr.status == 200 and first.startswith(b"data: "), f"held stream: {hr.status} {first[:100]!r}")
    st, r, hd = fx.post_headers(gw, chat, user("hello"))
    fx.check(st == 429 and fx.is_error(r), f"worker full: expected 429, got {st}: {str(r)[:300]}")
    # 429 and 503 say when to try again; other errors do not
    fx.check(hd.get("retry-after") == "1", f"429 retry-after: {hd}")
    hr.read()
    hc.close()
    stub.close()
    st, r, hd = fx.post_headers(gw, chat, {"model": "toy"})
    fx.check(st == 400 and "retry-after" not in hd, f"400 without retry-after: {st} {hd}")
    # 503: no worker listening
    gw2 = fx.Gateway(fx.model_block("toy", "m3", os.path.join(d, "tokenizer.json"), [f"127.0.0.1:{fx.free_port()}"],
                                    "health_check_interval 200ms;\n    retries 1;"))
    st, r, hd = fx.post_headers(gw2, chat, user("hello"), timeout=60)
    fx.check(st == 503 and fx.is_error(r), f"no worker: expected 503, got {st}: {str(r)[:300]}")
    fx.check(hd.get("retry-after") == "1", f"503 retry-after: {hd}")
    # the same over HTTP/2 (h2c prior knowledge): the header is added where both transports start a response
    p = subprocess.run(["curl", "-sS", "-i", "--noproxy", "*", "--http2-prior-knowledge", "-H",
                        "content-type: application/json", "--data-binary", json.dumps(user("hello")),
                        gw2.url(chat)], capture_output=True, timeout=60)
    head = p.stdout.decode(errors="replace").split("\r\n\r\n", 1)[0].lower()
    fx.check(head.startswith("http/2 503") and "\r\nretry-after: 1\r\n" in head + "\r\n",
             f"h2 503 retry-after: {head[:300]!r}")
    deadline = time.time() + 5  # three failed checks at 200 ms take the worker out
    while time.time() < deadline:
        st, body = fx.get(gw2, "/health/models")
        if st == 503:
            break
        time.sleep(0.1)
    fx.check(st == 503 and json.loads(body)["models"]["toy"]["status"] == "unavailable",
             f"/health/models without a worker: {st} {body[:300]}")
    # the gateway keeps serving after all that
    st, r = fx.post(gw, chat, user("still alive?"))
    fx.check(st == 200, f"after the errors: {st} {str(r)[:200]}")


def png_bytes(w, h):
    import io
    from PIL import Image
    im = Image.new("RGB", (w, h), (120, 30, 200))
    for x in range(0, w, 3):
        im.putpixel((x, x % h), (x % 256, 255, 0))
    b = io.BytesIO()
    im.save(b, "PNG")
    return b.getvalue()


def _data_url_bytes(data, mime="image/png"):
    import base64
    return f"data:{mime};base64," + base64.b64encode(data).decode()


fx.data_url_bytes = _data_url_bytes


# ---------------------------------------------------------------- toy worker

def case_toy():
    d = tempfile.mkdtemp(prefix="mmgw-api-toy-")
    gw, (toy,), ids = toy_setup(d, "--max-context", "60000")
    prompt = "alpha beta gamma delta"
    pids = tokenize(gw, prompt)
    # echo mode: choice i token j = prompt_ids[(j + i) % len]
    st, r = fx.post(gw, "/v1/completions", {"model": "toy", "prompt": prompt, "max_tokens": len(pids), "n": 2,
                                             "logprobs": 1})
    if fx.check(st == 200, f"completions: {st} {str(r)[:300]}"):
        fx.check(r["choices"][0]["text"] == prompt, f"echo: {r['choices'][0]['text']!r}")
        rot = pids[1:] + pids[:1]
        fx.check(r["choices"][1]["text"] == detok(gw, rot), f"choice 1: {r['choices'][1]['text']!r}")
        lp = r["choices"][0]["logprobs"]
        fx.check(lp["token_logprobs"] == [-0.5] * len(pids) and len(lp["top_logprobs"][0]) == 1, f"logprobs: {lp}")
        fx.check(r["usage"] == {"prompt_tokens": len(pids), "completion_tokens": 2 * len(pids),
                                "total_tokens": 3 * len(pids), "prompt_tokens_details": {"cached_tokens": 0}},
                 f"usage: {r['usage']}")
        fx.check(all(c["finish_reason"] == "length" for c in r["choices"]), "finish_reason length")
    # stop strings: matched on the text, across token boundaries, never emitted
    for stop in ("gamma", "ta ga", "a d"):
        st, r = fx.post(gw, "/v1/completions", {"model": "toy", "prompt": prompt, "max_tokens": 20, "stop": [stop]})
        want = prompt[:prompt.index(stop)]
        fx.check(st == 200 and r["choices"][0]["text"] == want and r["choices"][0]["finish_reason"] == "stop",
                 f"stop {stop!r}: {str(r)[:300]}")
    # the same streamed: concatenated deltas equal the non-streamed text
    st, ev = fx.sse_events(gw, "/v1/completions", {"model": "toy", "prompt": prompt, "max_tokens": 20,
                                                   "stop": "ta ga", "stream": True})
    if fx.check(st == 200 and ev[-1] == "[DONE]", f"stream: {st} {str(ev)[:300]}"):
        text = "".join(json.loads(e)["choices"][0]["text"] for e in ev[:-1])
        fx.check(text == prompt[:prompt.index("ta ga")], f"streamed stop: {text!r}")
    # stop_token_ids: the id ends the choice and its text is not shown
    st, r = fx.post(gw, "/v1/completions", {"model": "toy", "prompt": pids, "max_tokens": 20,
                                             "stop_token_ids": [pids[2]]})
    fx.check(st == 200 and r["choices"][0]["text"] == detok(gw, pids[:2]) and
             r["choices"][0]["finish_reason"] == "stop" and r["usage"]["completion_tokens"] == 3,
             f"stop_token_ids: {str(r)[:300]}")
    # chat: the plugin's stop token [e~[ in the echo ends the answer and is not shown
    st, r = fx.post(gw, "/v1/chat/completions", {"model": "toy", "messages": [{"role": "user", "content": "hi"}],
                                                  "max_tokens": 500, "logprobs": True, "top_logprobs": 2,
                                                  "skip_special_tokens": False})  # show the echoed markers
    if fx.check(st == 200, f"chat: {st} {str(r)[:300]}"):
        c = r["choices"][0]
        fx.check(c["finish_reason"] == "stop" and "[e~[" not in c["message"]["content"],
                 f"chat stops on [e~[: {str(c)[:300]}")
        fx.check(c["message"]["content"].startswith("]~!b[]~b]system"), "chat echoes the M3 template")
        lp = c["logprobs"]["content"]
        fx.check(lp and lp[0]["logprob"] == -0.5 and len(lp[0]["top_logprobs"]) == 2 and lp[0]["bytes"],
                 f"chat logprobs: {str(lp[:1])[:300]}")
    # chat streaming with n=2: every choice gets a role chunk, deltas and one finish
    st, ev = fx.sse_events(gw, "/v1/chat/completions", {"model": "toy", "messages": [{"role": "user", "content": "yo"}],
                                                        "max_tokens": 6, "n": 2, "stream": True})
    if fx.check(st == 200 and ev[-1] == "[DONE]", f"chat stream n=2: {st}"):
        chunks = [json.loads(e) for e in ev[:-1]]
        for i in range(2):
            mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == i]
            fx.check(mine[0]["delta"].get("role") == "assistant", f"choice {i} role")
            fx.check(sum(1 for c in mine if c["finish_reason"]) == 1 and mine[-1]["finish_reason"] == "length",
                     f"choice {i} finish")
    # /v1/models
    st, body = fx.get(gw, "/v1/models")
    m = json.loads(body)
    fx.check(st == 200 and m["object"] == "list" and m["data"][0]["id"] == "toy" and
             m["data"][0]["max_model_len"] == 60000, f"/v1/models: {body}")
    # a long prompt (> 32 KiB) is tokenized on the preprocessing pool: same ids, echoed back verbatim
    long_text = "".join(f"line {i}: the quick brown fox; " for i in range(1200))
    st, t = fx.post(gw, "/tokenize", {"model": "toy", "prompt": long_text, "add_special_tokens": False})
    st2, r = fx.post(gw, "/v1/completions", {"model": "toy", "prompt": long_text, "max_tokens": t["count"],
                                              "add_special_tokens": False})
    fx.check(st == 200 and st2 == 200 and r["usage"]["prompt_tokens"] == t["count"] and
             r["choices"][0]["text"] == long_text, f"long prompt: {st} {st2} {str(r)[:200]}")
    # a body over 256 KiB is parsed on the preprocessing pool: the same answers and the same errors
    # (whitespace and a prompt of token ids make the bytes without making the prompt long)
    pad = " " * (300 * 1024)

    def big(body):
        return (json.dumps(body) + pad).encode()

    ids = (pids * (40000 // len(pids) + 1))[:40000]
    st, r = fx.post(gw, "/v1/completions", None, raw=big({"model": "toy", "prompt": ids, "max_tokens": 5}))
    fx.check(st == 200 and r["usage"]["prompt_tokens"] == 40000 and r["choices"][0]["text"] == detok(gw, ids[:5]),
             f"big body completion: {st} {str(r)[:200]}")
    st, r = fx.post(gw, "/tokenize", None, raw=big({"model": "toy", "prompt": prompt, "add_special_tokens": False}))
    fx.check(st == 200 and r["tokens"] == pids, f"big body tokenize: {st} {str(r)[:200]}")
    chat = {"model": "toy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 500}
    st, small_r = fx.post(gw, "/v1/chat/completions", chat)
    st2, r = fx.post(gw, "/v1/chat/completions", None, raw=big(chat))
    fx.check(st == 200 and st2 == 200 and r["choices"][0]["message"] == small_r["choices"][0]["message"],
             f"big body chat: {st} {st2} {str(r)[:200]}")
    bad = b'{"model": "toy", "prompt": "x",' + pad.encode() + b"}"
    st, r = fx.post(gw, "/v1/completions", None, raw=bad)
    fx.check(st == 400 and "not valid JSON (line 1" in r["error"]["message"], f"big bad JSON: {st} {str(r)[:200]}")
    st, r = fx.post(gw, "/v1/chat/completions", None, raw=big(dict(chat, model="nope")))
    fx.check(st == 404 and r["error"]["code"] == "model_not_found", f"big body, unknown model: {st} {str(r)[:200]}")


def case_qwen2vl():
    """The second plugin behind the same gateway: Qwen2-VL's ChatML template, stop token and pad expansion
    (m3-tiny-a's tokenizer also holds the Qwen2-VL special tokens, ids 0-6), served by the toy worker."""
    fx.need_testdata()
    toy = fx.ToyWorker("--vocab", "8199", "--image-token", "5", "--video-token", "6")
    gw = fx.Gateway(fx.model_block("qwen", "qwen2vl", M3_TOK, [toy.addr], "health_check_interval 200ms;"))
    st, r = fx.post(gw, "/v1/chat/completions", {"model": "qwen", "messages": [{"role": "user", "content": "hi"}],
                                                  "max_tokens": 100, "skip_special_tokens": False})
    fx.check(st == 200 and r["choices"][0]["message"]["content"] == "<|im_start|>system\nYou are a helpful assistant."
             and r["choices"][0]["finish_reason"] == "stop", f"qwen2vl echo stops at <|im_end|>: {str(r)[:300]}")
    text = [{"type": "text", "text": "look"}]
    base = stream_usage(gw, text, model="qwen")
    img = stream_usage(gw, text + [{"type": "image_url", "image_url": {"url": fx.data_url_bytes(png_bytes(100, 60))}}],
                       model="qwen")
    # 60x100 -> 56x112 (multiples of 28, rounded half to even) -> a 4x8 patch grid -> 8 pads + vision_start/end
    if base is not None and img is not None:
        fx.check(img - base == 8 + 2, f"qwen2vl image costs {img - base} tokens, expected 10")


# ---------------------------------------------------------------- API surface details (audit)

def case_surface():
    """What SDKs and demanding clients rely on beyond the basic shapes: GET /v1/models/{id}, the parameter
    named by tool-definition errors, media errors that name the part once, and completions' text_offset."""
    d = tempfile.mkdtemp(prefix="mmgw-api-surf-")
    srv = fx.MediaServer({"/ok.png": png_bytes(40, 30)},
                         redirects={"/meta": "http://169.254.169.254/latest/meta-data", "/file": "file:///etc/passwd"})
    gw, (toy,), ids = toy_setup(d, model_name="org/toy-1", media="media_fetch_allow 127.0.0.1;")
    # retrieve a model: the same object as in the list; the name may be percent-encoded (SDKs send %2F)
    deadline = time.time() + 10  # max_model_len is null until the worker's ModelInfo is in
    while True:
        st, body = fx.get(gw, "/v1/models")
        listed = json.loads(body)["data"][0] if st == 200 else {}
        if listed.get("max_model_len") or time.time() > deadline:
            break
        time.sleep(0.05)
    for path in ("/v1/models/org/toy-1", "/v1/models/" + urllib.parse.quote("org/toy-1", safe="")):
        st, body = fx.get(gw, path)
        fx.check(st == 200 and json.loads(body) == listed, f"GET {path}: {st} {body[:300]} (listed {listed})")
    for path in ("/v1/models/nope", "/v1/models/", "/v1/models/org%2"):
        st, body = fx.get(gw, path)
        r = json.loads(body) if body.startswith("{") else {}
        fx.check(st == 404 and fx.is_error(r, "model") and r["error"]["code"] == "model_not_found",
                 f"GET {path}: {st} {body[:300]}")
    user = {"model": "org/toy-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    # a malformed tool definition is about 'tools', not 'messages'
    st, r = fx.post(gw, "/v1/chat/completions", dict(user, tools=[{"type": "function"}]))
    fx.check(st == 400 and fx.is_error(r, "tools", "tools[0]"), f"bad tool: {st} {str(r)[:300]}")
    # a media error names its part once, at the start of the message
    part = "messages[0].content[1].image_url"
    for url in ("data:image/png;base64,aGVsbG8gd29ybGQ=", "data:image/png,abc"):
        st, r = fx.post(gw, "/v1/chat/completions", dict(user, messages=[{"role": "user", "content": [
            {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": url}}]}]))
        msg = r["error"]["message"] if fx.is_error(r) else ""
        fx.check(st == 400 and fx.is_error(r, part) and msg.startswith(part + ": ") and msg.count(part) == 1,
                 f"media error message: {st} {str(r)[:300]}")
    # a part type the server does not know is refused, not silently dropped (an image would vanish)
    st, r = fx.post(gw, "/v1/chat/completions", dict(user, messages=[{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]))
    fx.check(st == 400 and fx.is_error(r, "messages[0].content[1]", "input_image"), f"unknown part: {st} {r}")
    st, r = fx.post(gw, "/v1/chat/completions", dict(user, messages=[
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "no"}]},
        {"role": "user", "content": "again"}]))
    fx.check(st == 200, f"text and refusal parts: {st} {str(r)[:200]}")
    # a refused image format is named as clients know it, not by libvips' class name
    svg = fx.data_url_bytes(b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>', "image/svg+xml")
    st, r = fx.post(gw, "/v1/chat/completions", dict(user, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": svg}}]}]))
    msg = r["error"]["message"] if fx.is_error(r) else ""
    fx.check(st == 400 and "'svg' is not accepted" in msg and "Vips" not in msg, f"svg: {st} {msg}")
    # a redirect to a refused address or scheme: the reason, once, without a doubled separator; never contacted
    for path, why in (("/meta", "metadata"), ("/file", "scheme")):
        st, r = fx.post(gw, "/v1/chat/completions", dict(user, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": srv.url(path)}}]}]))
        msg = r["error"]["message"] if fx.is_error(r) else ""
        fx.check(st == 400 and "redirected (hop 1): media URL" in msg and ": :" not in msg and why in msg,
                 f"redirect {path}: {st} {msg}")
    st, r = fx.post(gw, "/v1/chat/completions", dict(user, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": srv.url("/ok.png")}}]}]))
    fx.check(st == 200, f"allowed loopback fetch: {st} {str(r)[:200]}")
    fx.check(srv.hits == ["/meta", "/file", "/ok.png"], f"media server hits: {srv.hits}")
    srv.close()
    # text_offset: where each token's text starts in the completion, in characters (the characters that start
    # before the token's first byte), the same streamed and not. The echo worker repeats the prompt, whose
    # multi-byte characters the byte-level tokenizer may split across tokens.
    prompt = "caf\u00e9 na\u00efve \u65e5\u672c \U0001f600 end \u00e9\u00e9"
    pids = tokenize(gw, prompt, "org/toy-1")
    tb = token_bytes(os.path.join(d, "tokenizer.json"))
    starts, at = [], 0  # byte offset where each character of the prompt starts
    for ch in prompt:
        starts.append(at)
        at += len(ch.encode())
    want, b0 = [], 0
    for t in pids:
        want.append(sum(1 for x in starts if x < b0))
        b0 += len(tb[t])
    fx.check(b"".join(tb[t] for t in pids) == prompt.encode(), "token bytes rebuild the prompt")
    b = {"model": "org/toy-1", "prompt": prompt, "max_tokens": len(pids), "logprobs": 1, "add_special_tokens": False}
    st, r = fx.post(gw, "/v1/completions", b)
    if fx.check(st == 200, f"completions logprobs: {st} {str(r)[:300]}"):
        c = r["choices"][0]
        fx.check(c["text"] == prompt and c["logprobs"]["text_offset"] == want,
                 f"text_offset {c['logprobs']['text_offset']} want {want}")
        st, ev = fx.sse_events(gw, "/v1/completions", dict(b, stream=True))
        if fx.check(st == 200 and ev[-1] == "[DONE]", f"streamed logprobs: {st}"):
            offs = [o for e in ev[:-1] for o in (json.loads(e)["choices"][0]["logprobs"] or {}).get("text_offset", [])]
            fx.check(offs == want, f"streamed text_offset {offs} want {want}")


def case_conftest():
    """mmgw -t on model and media errors: each names the file and the line of the directive at fault (not only
    the model block's), in the main file and in an included one."""
    d = tempfile.mkdtemp(prefix="mmgw-api-conft-")
    tok, ids, vocab = demo_tokenizer(d)
    head = "http {\n    listen 127.0.0.1:0;\n}\n"
    cases = [
        ("model x {\n    plugin m3;\n    upstream 127.0.0.1:1;\n\n    tokenizer /nonexistent/tokenizer.json;\n}\n",
         r"t\.conf:8: model x: tokenizer /nonexistent/tokenizer\.json"),
        (f"model x {{\n    tokenizer {tok};\n    upstream 127.0.0.1:1;\n    plugin no_such_plugin;\n}}\n",
         r"t\.conf:7: model x: plugin .*no_such_plugin"),
        (f"model x {{\n    plugin m3;\n    tokenizer {tok};\n    upstream 127.0.0.1:1;\n    plugin_option video_fps 2;\n"
         f"    plugin_option bogus 1;\n}}\n", r"t\.conf:9: model x: .*plugin_option 'bogus'"),
        (f"model x {{\n    plugin m3;\n    tokenizer {tok};\n    upstream 127.0.0.1:1;\n"
         f"    plugin_option max_long_side_pixel abc;\n}}\n", r"t\.conf:8: model x: .*max_long_side_pixel"),
        (f"model y {{\n    plugin qwen2vl;\n    upstream 127.0.0.1:1;\n    tokenizer {tok};\n}}\n",
         r"t\.conf:7: model y: the plugin's stop token"),
        ("media {\n    fetch_timeout 5s;\n    media_fetch_allow 10.0.0.1/8;\n}\n",
         r"t\.conf:6: \"media_fetch_allow\" directive: invalid value \"10\.0\.0\.1/8\""),
        ("include inc.conf;\n", r"inc\.conf:3: model z: tokenizer /nonexistent\.json"),
        ("media {\n    allowed_local_media_path no-such-dir;\n}\n",
         r"t\.conf:5: \"allowed_local_media_path\" directive: .*no-such-dir\": No such file"),
        ("media {\n    allowed_local_media_path inc.conf;\n}\n",
         r"t\.conf:5: \"allowed_local_media_path\" directive: .*inc\.conf\": not a directory"),
    ]
    def mmgw_t(name, text):
        """mmgw -t on text written to d/name: (exit status, stderr)."""
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
        p = subprocess.run([fx.MMGW, "-t", "-c", os.path.join(d, name)], capture_output=True, timeout=60, cwd=d)
        return p.returncode, p.stderr.decode(errors="replace")

    # a key with a blank, and an origin with a path, in the http block of a file of their own
    rc, err = mmgw_t("keys.conf", "http {\n    listen 127.0.0.1:0;\n    api_key ok-key \"a b\";\n}\n")
    fx.check(rc != 0 and 'keys.conf:3: "api_key" directive: key 2 has a character other' in err,
             f"api_key with a blank: rc {rc}: {err}")
    rc, err = mmgw_t("cors.conf", "http {\n    listen 127.0.0.1:0;\n    cors_allow_origin https://app.example.com/ui;\n}\n")
    fx.check(rc != 0 and 'cors.conf:3: "cors_allow_origin" directive: invalid origin' in err,
             f"an origin with a path: rc {rc}: {err}")
    with open(os.path.join(d, "inc.conf"), "w") as f:
        f.write("model z {\n    plugin m3;\n    tokenizer /nonexistent.json;\n    upstream 127.0.0.1:1;\n}\n")
    import re
    for body, want in cases:
        rc, err = mmgw_t("t.conf", head + body)
        fx.check(rc != 0 and re.search(want, err), f"mmgw -t: want /{want}/, got rc {rc}: {err}")
    rc, err = mmgw_t("t.conf", head + f"model x {{\n    plugin m3;\n    tokenizer {tok};\n    upstream 127.0.0.1:1;\n}}\n")
    fx.check(rc == 0, f"a good config passes: {err}")

def token_bytes(path):
    """{id: bytes} of a byte-level BPE tokenizer.json (GPT-2's byte-to-character map; added tokens as UTF-8)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for x in range(256):
        if x not in bs:
            bs.append(x)
            cs.append(256 + n)
            n += 1
    dec = {chr(c): b for b, c in zip(bs, cs)}
    with open(path) as f:
        t = json.load(f)
    out = {i: bytes(dec[ch] for ch in s) for s, i in t["model"]["vocab"].items()}
    out.update({a["id"]: a["content"].encode() for a in t["added_tokens"]})
    return out


# ---------------------------------------------------------------- reasoning, tool calls, worker failures

class ScriptWorker(fx.Proc):
    def __init__(self, d, vocab, eos):
        self.script = os.path.join(d, "script.json")
        self.set([])
        pf = os.path.join(d, "sport")
        super().__init__([fx.PY, os.path.join(os.path.dirname(os.path.abspath(__file__)), "script_worker.py"),
                          "--listen", "127.0.0.1:0", "--port-file", pf, "--script", self.script, "--vocab", str(vocab),
                          "--eos", str(eos)], "script")
        self.port = fx.wait_port_file(pf, self)
        self.addr = f"127.0.0.1:{self.port}"

    def set(self, ids, **kw):
        with open(self.script, "w") as f:
            json.dump(dict(kw, ids=ids), f)


WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
                                                  "parameters": {"type": "object", "properties": {
                                                      "city": {"type": "string"}, "days": {"type": "integer"}}}}}


def case_parse():
    d = tempfile.mkdtemp(prefix="mmgw-api-parse-")
    tok, ids, vocab = demo_tokenizer(d)
    sw = ScriptWorker(d, vocab, ids["[e~["])
    gw = fx.Gateway(fx.model_block("m3", "m3", tok, [sw.addr], "retries 0;"))
    NS = "]<]minimax[>["
    out = ("<mm:think>I should call the tool.</mm:think>Let me check." + NS + "<tool_call>\n" + NS +
           '<invoke name="get_weather">' + NS + "<city>Paris" + NS + "</city>" + NS + "<days>2" + NS + "</days>" + NS +
           "</invoke>\n" + NS + "</tool_call>")
    sw.set(tokenize(gw, out) + [ids["[e~["]])
    body = {"model": "m3", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER_TOOL],
            "max_tokens": 200}
    st, r = fx.post(gw, "/v1/chat/completions", body)
    if fx.check(st == 200, f"tool chat: {st} {str(r)[:300]}"):
        c = r["choices"][0]
        m = c["message"]
        fx.check(m.get("reasoning_content") == "I should call the tool.", f"reasoning: {m}")
        fx.check(m["content"] == "Let me check.", f"content: {m}")
        calls = m.get("tool_calls") or []
        fx.check(len(calls) == 1 and calls[0]["type"] == "function" and calls[0]["id"].startswith("call_") and
                 calls[0]["function"]["name"] == "get_weather" and
                 json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris", "days": 2}, f"tool_calls: {calls}")
        fx.check(c["finish_reason"] == "tool_calls", f"finish_reason {c['finish_reason']}")
        print("tool chat answer:", json.dumps(m)[:400])
    # tool_choice "none", or no tools offered: the markup stays content and no call is reported (vLLM, SGLang)
    visible = out[out.index("</mm:think>") + len("</mm:think>"):]
    for what, b in (("tool_choice none", dict(body, tool_choice="none")),
                    ("no tools", {k: v for k, v in body.items() if k != "tools"})):
        st, r = fx.post(gw, "/v1/chat/completions", b)
        if fx.check(st == 200, f"{what}: {st} {str(r)[:300]}"):
            c = r["choices"][0]
            fx.check(c["message"]["content"] == visible and not c["message"].get("tool_calls") and
                     c["message"].get("reasoning_content") == "I should call the tool." and
                     c["finish_reason"] == "stop", f"{what}: {str(c)[:400]}")
        st, ev = fx.sse_events(gw, "/v1/chat/completions", dict(b, stream=True))
        if fx.check(st == 200 and ev[-1] == "[DONE]", f"{what} streamed: {st} {str(ev)[:300]}"):
            deltas = [json.loads(e)["choices"][0] for e in ev[:-1]]
            fx.check("".join(x["delta"].get("content") or "" for x in deltas) == visible and
                     not any(x["delta"].get("tool_calls") for x in deltas) and
                     [x["finish_reason"] for x in deltas if x["finish_reason"]] == ["stop"],
                     f"{what} streamed: {str(deltas)[-300:]}")
    # the same streamed: the deltas add up to the same message, the call's first delta names it
    st, ev = fx.sse_events(gw, "/v1/chat/completions", dict(body, stream=True))
    if fx.check(st == 200 and ev[-1] == "[DONE]", f"tool stream: {st} {str(ev)[:300]}"):
        deltas = [json.loads(e)["choices"][0] for e in ev[:-1]]
        reasoning = "".join(x["delta"].get("reasoning_content") or "" for x in deltas)
        content = "".join(x["delta"].get("content") or "" for x in deltas)
        tcs = [t for x in deltas for t in x["delta"].get("tool_calls") or []]
        fx.check(reasoning == "I should call the tool." and content == "Let me check.", f"stream text: {reasoning!r} {content!r}")
        fx.check(tcs and tcs[0]["index"] == 0 and tcs[0]["type"] == "function" and tcs[0]["id"].startswith("call_") and
                 tcs[0]["function"]["name"] == "get_weather", f"first tool delta: {tcs[:1]}")
        args = "".join(t["function"].get("arguments", "") for t in tcs)
        fx.check(json.loads(args) == {"city": "Paris", "days": 2} and all(t["index"] == 0 for t in tcs),
                 f"streamed arguments: {args!r}")
        fx.check([x["finish_reason"] for x in deltas if x["finish_reason"]] == ["tool_calls"], "one finish: tool_calls")
    # thinking_mode enabled: the answer starts inside the reasoning; the stop token is never shown
    sw.set(tokenize(gw, "plan it</mm:think>The answer.") + [ids["[e~["]])
    st, r = fx.post(gw, "/v1/chat/completions", dict(body, chat_template_kwargs={"thinking_mode": "enabled"}, tools=None))
    fx.check(st == 200 and r["choices"][0]["message"].get("reasoning_content") == "plan it" and
             r["choices"][0]["message"]["content"] == "The answer." and r["choices"][0]["finish_reason"] == "stop",
             f"thinking enabled: {str(r)[:300]}")
    # a stop string inside the answer cuts it and hides the rest, tool markup included
    sw.set(tokenize(gw, "Alpha beta. STOP here" + NS + "<tool_call>"))
    st, r = fx.post(gw, "/v1/chat/completions", dict(body, stop=[" STOP"]))
    fx.check(st == 200 and r["choices"][0]["message"]["content"] == "Alpha beta." and
             r["choices"][0]["finish_reason"] == "stop", f"stop string: {str(r)[:300]}")
    # the worker fails before any token: its status (RESOURCE_EXHAUSTED = 429); after tokens: an SSE error event
    sw.set([5, 6], error="RESOURCE_EXHAUSTED")
    st, r = fx.post(gw, "/v1/chat/completions", body)
    fx.check(st == 429 and fx.is_error(r), f"worker refused: {st} {str(r)[:300]}")
    # the client learns the worker's status, not its (internal) address; the log keeps it
    msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
    fx.check("RESOURCE_EXHAUSTED" in msg and sw.addr not in msg and sw.addr.rsplit(":", 1)[-1] not in msg,
             f"worker status without its address: {msg!r}")
    sw.set(tokenize(gw, "one two three four five six"), die_after=3)
    st, ev = fx.sse_events(gw, "/v1/chat/completions", dict(body, stream=True))
    if fx.check(st == 200 and isinstance(ev, list), f"mid-stream failure: {st} {str(ev)[:200]}"):
        last = json.loads(ev[-1]) if ev and ev[-1] != "[DONE]" else {}
        fx.check(fx.is_error(last) and len(ev) >= 2, f"mid-stream failure ends with an error event: {ev[-2:]}")
    st, r = fx.post(gw, "/v1/chat/completions", body)
    fx.check(st >= 500 and fx.is_error(r), f"non-streamed mid-stream failure: {st} {str(r)[:300]}")
    parse_lost_answers(gw, sw)
    parse_context_bound(d, tok, ids, sw)


def parse_lost_answers(gw, sw):
    """A choice the worker ends "abort" (it failed mid-generation, e.g. out of memory) or never ends before its
    stream ends OK is a truncated answer, which no OpenAI finish_reason says: the request fails as after a worker
    error mid-stream, a 503 or (streamed) the error event after the deltas so far, never finish_reason "abort"."""
    chat = "/v1/chat/completions"
    plain = {"model": "m3", "messages": [{"role": "user", "content": "Count."}], "max_tokens": 50}
    text = tokenize(gw, "one two three")
    for what, script, contains in (("abort", dict(finish="abort"), "aborted"),
                                   ("no Complete", dict(complete=False), "without finishing")):
        sw.set(text, **script)
        for n in (1, 2):
            st, r, hd = fx.post_headers(gw, chat, dict(plain, n=n))
            fx.check(st == 503 and fx.is_error(r, None, contains) and hd.get("retry-after") == "1",
                     f"{what}, n={n}: expected 503 '{contains}', got {st}: {str(r)[:300]} {hd}")
        st, ev = fx.sse_events(gw, chat, dict(plain, stream=True))
        if fx.check(st == 200 and isinstance(ev, list) and len(ev) >= 2, f"{what} streamed: {st} {str(ev)[:300]}"):
            last = json.loads(ev[-1]) if ev[-1] != "[DONE]" else {}
            chunks = [json.loads(e) for e in ev[:-1]]
            fx.check(fx.is_error(last, None, contains) and "[DONE]" not in ev, f"{what} streamed: ends {ev[-2:]}")
            fx.check("".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "one two three" and
                     not any(c["choices"][0]["finish_reason"] for c in chunks),
                     f"{what} streamed: the deltas before the error, no finish_reason: {str(chunks)[-300:]}")
    # mmgw-worker ends every open choice "abort" before its error status: the client gets that status
    sw.set(text, finish="abort", end_error="RESOURCE_EXHAUSTED")
    st, r = fx.post(gw, chat, plain)
    fx.check(st == 429 and fx.is_error(r, None, "RESOURCE_EXHAUSTED"), f"abort then status: {st} {str(r)[:300]}")
    # a choice the gateway ended first (a stop string) keeps its answer whatever the worker says after
    sw.set(tokenize(gw, "Alpha beta. STOP here and more"), finish="abort")
    st, r = fx.post(gw, chat, dict(plain, stop=[" STOP"]))
    fx.check(st == 200 and r["choices"][0]["message"]["content"] == "Alpha beta." and
             r["choices"][0]["finish_reason"] == "stop", f"stop string before an abort: {st} {str(r)[:300]}")


def parse_context_bound(d, tok, ids, sw):
    """Without max_tokens a choice ends at max_model_len (here 40: a 30-token prompt leaves 10). An eos the
    worker goes past (ignore_eos) at the bound still counts: nothing after it is shown, finish "length"; a
    request stop_token_ids hit (or an eos without ignore_eos) at the bound is the worker's "stop"."""
    gw = fx.Gateway(fx.model_block("m3", "m3", tok, [sw.addr], "retries 0;\n    max_model_len 40;"))
    a, b, c, x = (tokenize(gw, ch)[0] for ch in "abcx")
    eos = ids["[e~["]
    prompt = {"model": "m3", "prompt": [a] * 30}
    for what, script, req, want in (
            ("ignore_eos, eos at the bound", dict(ids=[b] * 9 + [eos, c, c]), dict(ignore_eos=True), "length"),
            ("ignore_eos, eos before the bound", dict(ids=[b] * 8 + [eos, c, c]), dict(ignore_eos=True), "length"),
            ("stop_token_ids at the bound", dict(ids=[b] * 9 + [x]), dict(ignore_eos=True, stop_token_ids=[x]),
             "stop"),
            ("eos at the bound", dict(ids=[b] * 9 + [eos]), {}, "stop")):
        n_text = script["ids"].index(eos if eos in script["ids"] else x)
        want_text = "b" * n_text + ("c" * (9 - n_text) if want == "length" else "")
        sw.set(**script)
        st, r = fx.post(gw, "/v1/completions", dict(prompt, **req))
        got = (r["choices"][0]["text"], r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]) \
            if st == 200 else (st, str(r)[:200])
        fx.check(got == (want_text, want, 10), f"{what}: expected {(want_text, want, 10)}, got {got}")
        st, ev = fx.sse_events(gw, "/v1/completions", dict(prompt, stream=True,
                                                           stream_options={"include_usage": True}, **req))
        ev = [json.loads(e) for e in ev if e.startswith("{")] if st == 200 else []
        got = ("".join(ch["text"] for e in ev for ch in e["choices"]),
               [ch["finish_reason"] for e in ev for ch in e["choices"] if ch["finish_reason"]],
               ev[-1]["usage"]["completion_tokens"] if ev and ev[-1].get("usage") else None)
        fx.check(got == (want_text, [want], 10), f"{what}, streamed: expected {(want_text, [want], 10)}, got {got}")
    gw.stop()


# ---------------------------------------------------------------- robustness

def random_value(rng, depth=0):
    kinds = ["str", "int", "float", "bool", "null", "list", "dict"] if depth < 3 else ["str", "int", "null"]
    k = rng.choice(kinds)
    if k == "str":
        return rng.choice(["", "x", "image_url", "text", "data:,", "http://127.0.0.1/x", "]<]image[>[", "\u00e9\ud83d\ude00",
                           "a" * rng.randint(0, 300), "file:///etc/passwd", "data:image/png;base64,AAAA"])
    if k == "int":
        return rng.choice([0, 1, -1, 2 ** 31, -2 ** 63, 10 ** 20, rng.randint(-5, 5000)])
    if k == "float":
        return rng.choice([0.5, -1e300, 1e-300, 3.5, 2.0])
    if k == "bool":
        return rng.random() < 0.5
    if k == "null":
        return None
    if k == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["role", "content", "type", "text", "image_url", "video_url", "url", "image", "tool_calls", "name",
            "reasoning_content", "arguments", "function", "tool_call_id"]
    return {rng.choice(keys): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def random_body(rng):
    roles = ["system", "user", "assistant", "tool", "developer", "root", "bogus", 5]
    msgs = []
    for _ in range(rng.randint(0, 4)):
        m = {"role": rng.choice(roles)}
        r = rng.random()
        if r < 0.3:
            m["content"] = random_value(rng)
        elif r < 0.8:
            m["content"] = [random_value(rng) if rng.random() < 0.3 else
                            {"type": rng.choice(["text", "image_url", "video_url", "image", "input_audio", 7]),
                             "text": random_value(rng), "image_url": random_value(rng)} for _ in range(rng.randint(0, 3))]
        else:
            m["content"] = "hello"
        if rng.random() < 0.2:
            m["tool_calls"] = random_value(rng)
        msgs.append(m)
    body = {"model": rng.choice(["toy", "toy", "nope", 3, None]), "messages": msgs if rng.random() < 0.9 else random_value(rng)}
    for k in ("max_tokens", "temperature", "top_p", "top_k", "n", "stop", "stream", "logprobs", "top_logprobs",
              "tools", "tool_choice", "stream_options", "seed", "stop_token_ids", "chat_template_kwargs",
              "response_format", "min_p"):
        if rng.random() < 0.15:
            body[k] = random_value(rng)
    body.setdefault("max_tokens", 4)
    return body


def case_robust():
    import random
    rng = random.Random(1234)
    d = tempfile.mkdtemp(prefix="mmgw-api-rob-")
    gw, (toy,), ids = toy_setup(d, "--rate", "200", models_extra="max_media_per_request 4;",
                                media="fetch_timeout 1s;\n    max_pixels 100000;")
    seen = {}
    for i in range(400):
        if i % 50 == 49:  # some raw garbage too
            raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
            st, r = fx.post(gw, "/v1/chat/completions", None, raw=raw)
        else:
            body = random_body(rng)
            path = rng.choice(["/v1/chat/completions", "/v1/chat/completions", "/tokenize", "/v1/completions"])
            if path == "/v1/completions":
                body = {"model": "toy", "prompt": random_value(rng), "max_tokens": 3,
                        "multi_modal_data": random_value(rng) if rng.random() < 0.3 else None}
            st, r = fx.post(gw, path, body, timeout=30)
        seen[st] = seen.get(st, 0) + 1
        ok = st == 200 or (st in (400, 404, 413, 429) and fx.is_error(r))
        if not fx.check(ok, f"random request {i}: {st} {str(r)[:300]}"):
            break
    print("statuses:", seen)
    fx.check(seen.get(200, 0) > 10 and seen.get(400, 0) > 50, f"the random mix hit both answers and refusals: {seen}")
    # many concurrent streams, half of them cut by the client mid-way
    def one(k):
        try:
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
            body = json.dumps({"model": "toy", "messages": [{"role": "user", "content": "go %d" % k}],
                               "max_tokens": 40, "stream": True}).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-length: " + str(len(body)).encode() +
                      b"\r\n\r\n" + body)
            got = b""
            while (k % 2 == 0 and got.count(b"data: ") < 3) or (k % 2 == 1 and b"[DONE]" not in got):
                c = s.recv(65536)
                if not c:
                    break
                got += c
            s.close()
            return k % 2 == 0 or b"[DONE]" in got
        except OSError:
            return False
    threads, results = [], []
    for k in range(40):
        t = threading.Thread(target=lambda k=k: results.append(one(k)))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(60)
    fx.check(len(results) == 40 and all(results), f"concurrent streams: {results.count(True)}/40 ok")
    st, r = fx.post(gw, "/v1/chat/completions", {"model": "toy", "messages": [{"role": "user", "content": "x"}],
                                                  "max_tokens": 3})
    fx.check(st == 200, "still serving after the random requests")


# ---------------------------------------------------------------- disconnect and failover

def worker_load(stub, pb2):
    return stub.Load(pb2.LoadRequest(), timeout=2)


def case_disconnect():
    import grpc
    d = tempfile.mkdtemp(prefix="mmgw-api-disc-")
    gw, (toy,), ids = toy_setup(d, "--rate", "20")
    pb2, pb2_grpc = fx.grpc_stubs()
    stub = pb2_grpc.WorkerStub(grpc.insecure_channel(toy.addr))
    for proto in ("h1", "h2"):
        if proto == "h1":
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            body = json.dumps({"model": "toy", "messages": [{"role": "user", "content": "talk"}], "max_tokens": 2000,
                               "stream": True}).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                      b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            got = b""
            while got.count(b"data: ") < 3:
                got += s.recv(65536)
            close = s.close
        else:
            p = subprocess.Popen(["curl", "-sN", "--http2-prior-knowledge", "-H", "content-type: application/json",
                                  "-d", json.dumps({"model": "toy", "messages": [{"role": "user", "content": "talk"}],
                                                    "max_tokens": 2000, "stream": True}),
                                  gw.url("/v1/chat/completions")], stdout=subprocess.PIPE)
            got = b""
            while got.count(b"data: ") < 3:
                got += p.stdout.read1(65536)
            close = lambda: (p.kill(), p.wait())
        fx.check(worker_load(stub, pb2).running_requests == 1, f"{proto}: the worker runs the stream")
        t0 = time.time()
        close()
        running = 1
        while time.time() - t0 < 5:
            running = worker_load(stub, pb2).running_requests
            if running == 0:
                break
            time.sleep(0.01)
        dt = time.time() - t0
        print(f"{proto}: client gone -> worker request ended in {dt * 1000:.0f} ms (includes the Load polling)")
        fx.check(running == 0 and dt < 1.0, f"{proto}: worker still running {running} after {dt:.2f}s")
    st, r = fx.post(gw, "/v1/chat/completions", {"model": "toy", "messages": [{"role": "user", "content": "x"}],
                                                  "max_tokens": 3})
    fx.check(st == 200, "serving after disconnects")
    # a media fetch of a request whose client went away stops (the service loop polls the request's stop flag)
    # instead of holding a connection to a server that never answers until fetch_timeout (20 s here)
    stall = socket.socket()
    stall.bind(("127.0.0.1", 0))
    stall.listen(4)
    gw2, _, _ = toy_setup(tempfile.mkdtemp(prefix="mmgw-api-disc2-"),
                          media="media_fetch_allow 127.0.0.1;\n    fetch_timeout 20s;")
    body = json.dumps({"model": "toy", "max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"http://127.0.0.1:{stall.getsockname()[1]}/never.png"}},
        {"type": "text", "text": "look"}]}]}).encode()
    c = socket.create_connection(("127.0.0.1", gw2.port), timeout=10)
    c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    stall.settimeout(10)
    conn, _ = stall.accept()  # the gateway's fetch arrived
    conn.settimeout(0.2)
    req = b""
    while b"\r\n\r\n" not in req:
        req += conn.recv(4096)
    t0 = time.time()
    c.close()
    closed = False
    while time.time() - t0 < 3 and not closed:
        try:
            closed = conn.recv(4096) == b""
        except socket.timeout:
            pass
    dt = time.time() - t0
    print(f"client gone -> media fetch closed in {dt * 1000:.0f} ms")
    fx.check(closed and dt < 1.5, f"the media fetch of a gone client still open after {dt:.2f} s")
    conn.close()
    stall.close()


def long_gif(w, h, n, delay_cs):
    """A w x h GIF of n 1x1-pixel frames delay_cs/100 s apart: a few KiB, but no frame is a keyframe and every
    sampled frame is a whole canvas to decode, convert and resize (tests/unit/media/test_media_time.c)."""
    out = bytearray(b"GIF89a" + struct.pack("<HH", w, h) + bytes([0xF0, 0, 0, 0, 0, 0, 255, 255, 255]))
    out += b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    for i in range(n):
        out += b"\x21\xf9\x04\x04" + struct.pack("<H", delay_cs) + b"\x00\x00"
        out += b"\x2c" + struct.pack("<HHHH", i % w, (i // w) % h, 1, 1) + b"\x00\x02\x02\x44\x01\x00"
    return bytes(out + b"\x3b")


def case_media_time():
    d = tempfile.mkdtemp(prefix="mmgw-api-mtime-")
    # one preprocessing thread; frames resized to 112 x 112 so that the time goes into the 2000 x 2000 canvas (about
    # 10 ms a frame, 500 frames sampled at 1 fps: ~5 s of work for 11 KiB)
    extra = "preprocess_threads 1;\n    plugin_option video_max_pixels 12544;"
    gw, (toy,), ids = toy_setup(d, models_extra=extra, media="preprocess_timeout 200ms;")
    gw_long = fx.Gateway(fx.model_block("toy", "m3", os.path.join(d, "tokenizer.json"), [toy.addr], extra))
    slow = fx.data_url_bytes(long_gif(2000, 2000, 500, 100), "image/gif")
    small = fx.data_url_bytes(png_bytes(64, 48))

    def chat(kind, url):
        return {"model": "toy", "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": f"{kind}_url", f"{kind}_url": {"url": url}}, {"type": "text", "text": "what is it?"}]}]}

    # 1. over the budget: a prompt 400 naming the part and the limit
    t0 = time.time()
    st, r = fx.post(gw, "/v1/chat/completions", chat("video", slow), timeout=30)
    dt = time.time() - t0
    print(f"budget 200 ms: {st} in {dt * 1000:.0f} ms: {str(r)[:300]}")
    fx.check(st == 400 and fx.is_error(r, "messages[0].content[0].video_url", "time limit of 200 ms"),
             f"over preprocess_timeout: {st} {str(r)[:300]}")
    fx.check(dt < 1.5, f"the 200 ms budget answered after {dt:.2f} s")
    st, r = fx.post(gw, "/v1/chat/completions", chat("image", small), timeout=30)
    fx.check(st == 200, f"an image within the budget: {st} {str(r)[:200]}")

    # 2. the client goes away while its video is preprocessed (default budget: 60 s): the job stops, and the next
    # request, queued behind it on the only pool thread, is served at once instead of seconds later
    body = json.dumps(chat("video", slow)).encode()
    for proto in ("h1", "h2"):
        if proto == "h1":
            s = socket.create_connection(("127.0.0.1", gw_long.port), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                      b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            close = s.close
        else:
            p = subprocess.Popen(["curl", "-s", "--http2-prior-knowledge", "-H", "content-type: application/json",
                                  "--data-binary", "@-", gw_long.url("/v1/chat/completions")],
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
            p.stdin.write(body)
            p.stdin.close()
            close = lambda: (p.kill(), p.wait())
        time.sleep(0.5)  # the video is being preprocessed now (its data: URL decodes in a millisecond)
        close()
        t0 = time.time()
        st, r = fx.post(gw_long, "/v1/chat/completions", chat("image", small), timeout=30)
        dt = time.time() - t0
        print(f"{proto}: client gone -> the next request took {dt * 1000:.0f} ms ({st})")
        fx.check(st == 200, f"{proto}: the request after the disconnect: {st} {str(r)[:200]}")
        fx.check(dt < 1.0, f"{proto}: the request after the disconnect waited {dt:.2f} s behind the abandoned video")
    # the abandoned requests are counted as 499 (client closed request)
    st, m = fx.get(gw_long, "/metrics")
    fx.check(st == 200 and any(l.startswith("mmgw_api_requests_total") and '"499"' in l for l in m.splitlines()),
             "499 for the abandoned requests in /metrics")


def case_failover():
    d = tempfile.mkdtemp(prefix="mmgw-api-fo-")
    gw, workers, ids = toy_setup(d, n_workers=2, models_extra="retries 2;\n    breaker_failures 2;")
    body = {"model": "toy", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 4}
    for i in range(6):
        st, r = fx.post(gw, "/v1/chat/completions", body)
        fx.check(st == 200, f"before the kill, request {i}: {st}")
    workers[0].kill()
    ok = 0
    for i in range(20):
        st, r = fx.post(gw, "/v1/chat/completions", body, timeout=30)
        ok += st == 200
        if st != 200:
            print(f"request {i} after the kill: {st} {str(r)[:200]}")
    fx.check(ok == 20, f"after one worker died: {ok}/20 requests succeeded")
    deadline = time.time() + 5  # three failed health checks at 200 ms take it out
    while time.time() < deadline:
        st, body = fx.get(gw, "/health/models")
        h = json.loads(body)["models"]["toy"]
        dead = [w for w in h["workers"] if w["target"] == workers[0].addr][0]
        if dead["health"] == "unhealthy":
            break
        time.sleep(0.1)
    fx.check(h["status"] == "ok" and dead["health"] == "unhealthy", f"/health/models after the kill: {body}")


def case_backpressure():
    """The toy worker's Load reports pages that grow with every generated token, so it shows whether the
    worker's stream stalls while the client does not read (gateway paused it) and resumes when it reads."""
    import grpc
    d = tempfile.mkdtemp(prefix="mmgw-api-bp-")
    gw, (toy,), ids = toy_setup(d, "--max-context", "400000", "--total-pages", "1000000", "--block-size", "16",
                                http_extra="stream_buffer_max 256k;")
    pb2, pb2_grpc = fx.grpc_stubs()
    stub = pb2_grpc.WorkerStub(grpc.insecure_channel(toy.addr))
    used = lambda: 1000000 - worker_load(stub, pb2).free_kv_pages
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", gw.port))
    body = json.dumps({"model": "toy", "prompt": "one two three four five six seven eight nine ten",
                       "max_tokens": 300000, "stream": True}).encode()
    rss0 = gw.rss_kb()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    # The socket buffers fill first; on a loaded machine that takes a while, so wait (bounded) for the worker's
    # page count to stop moving, then require that it stays still for 2 s.
    deadline = time.time() + 20
    p1 = used()
    while True:
        time.sleep(2)
        p2 = used()
        if p2 - p1 <= 2 or time.time() > deadline:
            break
        p1 = p2
    grown = gw.rss_kb() - rss0
    print(f"client not reading: worker pages {p1} -> {p2} over 2 s; gateway RSS grew {grown} kB")
    fx.check(p1 > 0 and p2 - p1 <= 2, f"the worker kept generating while the client did not read ({p1} -> {p2})")
    if not fx.sanitized():  # ASan keeps freed memory in quarantine: RSS says nothing there
        fx.check(grown < 8 * 1024, f"the gateway buffered {grown} kB for a client that does not read")
    # the client reads: the stream resumes and the events arrive in order (the toy counts up in echo order).
    # Read for 3 s, and on a loaded machine on (bounded) until the worker's pages show the resume: a clean-clone
    # run with both cores compiling once saw no resume within the 3 s.
    s.settimeout(30)
    data = b""
    t0 = time.time()
    while time.time() - t0 < 20:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        data += chunk
        if time.time() - t0 >= 3 and used() > p2 + 10 and data.count(b"data: {") > 1000:
            break
    p3 = used()
    fx.check(p3 > p2 + 10, f"the worker did not resume after the client read ({p2} -> {p3})")
    texts = []
    for block in data.split(b"\n\n"):
        i = block.find(b"data: {")
        if i >= 0:
            try:
                texts.append(json.loads(block[i + 6:])["choices"][0]["text"])
            except ValueError:
                pass  # a chunk-size line cut the event: ignored
    joined = "".join(texts)
    fx.check(len(texts) > 1000 and joined.startswith("one two three four five six seven eight nine ten"),
             f"events after resuming: {len(texts)}, text starts {joined[:60]!r}")
    s.close()


# ---------------------------------------------------------------- reload and metrics

def case_reload():
    d = tempfile.mkdtemp(prefix="mmgw-api-rl-")
    gw, (toy,), ids = toy_setup(d, "--rate", "40")
    tok = os.path.join(d, "tokenizer.json")
    result = {}

    def long_stream():
        result["r"] = fx.sse_events(gw, "/v1/chat/completions", {"model": "toy", "messages": [
            {"role": "user", "content": "a long answer"}], "max_tokens": 60, "stream": True})

    t = threading.Thread(target=long_stream, daemon=True)
    t.start()
    time.sleep(0.4)
    gw.write_conf(fx.model_block("toy", "m3", tok, [toy.addr]) + fx.model_block("toy2", "m3", tok, [toy.addr]))
    gw.proc.send_signal(signal.SIGHUP)
    gw.wait_log(r"reloaded", 1, timeout=30)
    st, body = fx.get(gw, "/v1/models")
    fx.check(st == 200 and {m["id"] for m in json.loads(body)["data"]} == {"toy", "toy2"}, f"after reload: {body}")
    st, r = fx.post(gw, "/v1/chat/completions", {"model": "toy2", "messages": [{"role": "user", "content": "x"}],
                                                  "max_tokens": 3})
    fx.check(st == 200, f"the new model answers: {st} {str(r)[:200]}")
    t.join(60)
    st, ev = result.get("r", (0, []))
    fx.check(st == 200 and ev and ev[-1] == "[DONE]" and
             sum(1 for e in ev[:-1] if json.loads(e)["choices"] and json.loads(e)["choices"][0]["finish_reason"]) == 1,
             f"the stream across the reload: {st} {str(ev)[-300:]}")
    # a broken config is refused and the running one keeps serving
    gw.write_conf("model broken { plugin m3; tokenizer /nonexistent.json; upstream 127.0.0.1:1; }\n")
    gw.proc.send_signal(signal.SIGHUP)
    gw.wait_log(r"reload failed", 1, timeout=30)
    st, r = fx.post(gw, "/v1/chat/completions", {"model": "toy", "messages": [{"role": "user", "content": "x"}],
                                                  "max_tokens": 3})
    fx.check(st == 200, f"after a failed reload: {st}")


def case_metrics():
    d = tempfile.mkdtemp(prefix="mmgw-api-met-")
    gw, (toy,), ids = toy_setup(d)
    for _ in range(3):
        fx.post(gw, "/v1/chat/completions", {"model": "toy", "messages": [{"role": "user", "content": "m"}],
                                              "max_tokens": 5})
    fx.post(gw, "/v1/chat/completions", {"model": "toy", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "m"}, {"type": "image_url", "image_url": {"url": fx.data_url_bytes(png_bytes(64, 48))}}]}],
                                          "max_tokens": 2})
    fx.post(gw, "/v1/chat/completions", {"model": "nope", "messages": []})
    st, txt = fx.get(gw, "/metrics")
    fx.check(st == 200, "metrics status")

    def val(name, **labels):
        for line in txt.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                if all(f'{k}="{v}"' in line for k, v in labels.items()):
                    return float(line.rsplit(" ", 1)[1])
        return None

    fx.check(val("mmgw_api_requests_total", model="toy", endpoint="chat", status="200") == 4,
             "requests_total{toy,chat,200} == 4")
    fx.check(val("mmgw_api_requests_total", model="(none)", endpoint="chat", status="404") == 1, "404 counted")
    fx.check(val("mmgw_api_time_to_first_token_seconds_count", model="toy", endpoint="chat") == 4, "ttft count")
    fx.check(val("mmgw_api_tokens_total", model="toy", kind="completion") == 17, "completion tokens 3*5+2")
    fx.check((val("mmgw_api_tokens_total", model="toy", kind="prompt") or 0) > 0, "prompt tokens")
    for stage in ("decode", "resize", "tokenize"):
        fx.check((val("mmgw_api_preprocess_seconds_count", stage=stage) or 0) >= 1, f"preprocess stage {stage}")
    fx.check(val("mmgw_api_media_total", model="toy", kind="image") == 1, "media_total image")
    fx.check(val("mmgw_worker_healthy", model="toy", worker=toy.addr) == 1, "worker healthy gauge")
    fx.check(val("mmgw_worker_in_flight", model="toy", worker=toy.addr) == 0, "worker in-flight gauge")
    fx.check(val("mmgw_http_requests_total", route="/v1/chat/completions", method="POST", status="200") == 4,
             "the server's own request counter")


# ---------------------------------------------------------------- demo (no ../shared)

def smart_resize(h, w, factor=28, min_px=3136, max_px=451584):
    import math

    def rnd(x):
        return round(x)  # Python rounds halves to even, as the reference

    hb, wb = max(factor, rnd(h / factor) * factor), max(factor, rnd(w / factor) * factor)
    if hb * wb > max_px:
        beta = math.sqrt(h * w / max_px)
        hb, wb = math.floor(h / beta / factor) * factor, math.floor(w / beta / factor) * factor
    elif hb * wb < min_px:
        beta = math.sqrt(min_px / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def case_demo():
    fx.need_file(fx.MKDEMO, "mmgw-mkdemo")
    d = tempfile.mkdtemp(prefix="mmgw-api-demo-")
    tok, ids, vocab = demo_tokenizer(d)
    subprocess.run([fx.MKDEMO, "--out", os.path.join(d, "ckpt"), "--tokenizer", tok], check=True, capture_output=True,
                   timeout=120)
    w = fx.RealWorker(os.path.join(d, "ckpt"))
    png = png_bytes(100, 60)
    srv = fx.MediaServer({"/cat.png": png})
    # file: URLs beneath a folder: the image itself, a link inside, and what must stay out of reach
    mdir = os.path.join(d, "media")
    os.makedirs(os.path.join(mdir, "sub dir"))
    with open(os.path.join(mdir, "sub dir", "cat.png"), "wb") as f:
        f.write(png)
    with open(os.path.join(d, "secret.png"), "wb") as f:
        f.write(png)
    os.symlink("../secret.png", os.path.join(mdir, "out.png"))
    os.symlink("sub dir/cat.png", os.path.join(mdir, "in.png"))
    os.mkfifo(os.path.join(mdir, "fifo.png"))
    gw = fx.Gateway(fx.model_block("m3-demo", "m3", tok, [w.addr]) +
                    fx.model_block("m3-demo-low", "m3", tok, [w.addr], "plugin_option max_pixels 60000;"),
                    media=f"media_fetch_allow 127.0.0.1;\n    allowed_local_media_path {mdir};")
    # text, then the same with an image by data: URL and by URL: the image costs grid/4 + 2 tokens
    text = [{"type": "text", "text": "What is in the picture"}]
    base = stream_usage(gw, text, model="m3-demo")
    h, wd = smart_resize(60, 100)
    want = (h // 14) * (wd // 14) // 4 + 2
    u1 = stream_usage(gw, text + [{"type": "image_url", "image_url": {"url": fx.data_url_bytes(png)}}], model="m3-demo")
    u2 = stream_usage(gw, text + [{"type": "image_url", "image_url": {"url": srv.url("/cat.png")}}], model="m3-demo")
    if base is not None and u1 is not None:
        fx.check(u1 - base == want, f"demo image by data: URL costs {u1 - base}, expected {want}")
    fx.check(u2 == u1, f"by URL {u2} tokens, by data: URL {u1}")
    fx.check(srv.hits == ["/cat.png"], f"media server hits: {srv.hits}")
    srv.close()
    for url in ("file://" + urllib.parse.quote(os.path.join(mdir, "sub dir", "cat.png")),
                "file://localhost" + urllib.parse.quote(os.path.join(mdir, "in.png"))):
        u3 = stream_usage(gw, text + [{"type": "image_url", "image_url": {"url": url}}], model="m3-demo")
        fx.check(u3 == u1, f"by {url}: {u3} tokens, by data: URL {u1}")
    for url, status, want in (("file://" + os.path.join(d, "secret.png"), 400, "outside the folder"),
                              ("file://" + os.path.join(mdir, "sub dir", "..", "..", "secret.png"), 400, "leads out"),
                              ("file://" + os.path.join(mdir, "out.png"), 400, "leads out"),
                              ("file://" + os.path.join(mdir, "none.png"), 400, "no such file"),
                              ("file://" + os.path.join(mdir, "fifo.png"), 400, "not a regular file"),
                              ("file://example.com" + os.path.join(mdir, "in.png"), 400, "host"),
                              ("file://" + os.path.join(mdir, "in.png") + "?x", 400, "query")):
        st, r = fx.post(gw, "/v1/chat/completions", {"model": "m3-demo", "max_tokens": 1, "messages": [
            {"role": "user", "content": text + [{"type": "image_url", "image_url": {"url": url}}]}]})
        msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else str(r)
        fx.check(st == status and want in msg, f"{url}: want {status} '{want}', got {st}: {r}")
    # the same file preprocessed at another size (a second model with its own plugin_option, same worker) must
    # not lend its cached pages: greedy answers for one set of pixels agree whichever encoding was sent first
    rng = random.Random(7)
    noise = b"".join(b"\x00" + bytes(rng.getrandbits(8) for _ in range(400 * 3)) for _ in range(300))
    chunk = lambda t, b: struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
    enc = lambda level: (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 400, 300, 8, 2, 0, 0, 0)) +
                         chunk(b"IDAT", zlib.compress(noise, level)) + chunk(b"IEND", b""))

    def greedy(model, png):
        parts = [{"type": "image_url", "image_url": {"url": fx.data_url_bytes(png)}}, {"type": "text", "text": "Describe"}]
        st, r = fx.post(gw, "/v1/chat/completions", {"model": model, "max_tokens": 12, "temperature": 0,
                                                      "messages": [{"role": "user", "content": parts}]})
        return r["choices"][0]["message"]["content"] if st == 200 else f"{st}: {r}"
    greedy("m3-demo-low", enc(9))
    after_low, fresh = greedy("m3-demo", enc(9)), greedy("m3-demo", enc(0))
    fx.check(after_low == fresh, f"same pixels, other answers: {after_low!r} after the small copy, {fresh!r} fresh")
    # completions from ids and text agree; greedy decoding is deterministic
    ids_hello = tokenize(gw, "Hello demo world", model="m3-demo")
    b = {"model": "m3-demo", "max_tokens": 6, "temperature": 0, "logprobs": 0, "return_tokens_as_token_ids": True}
    st1, r1 = fx.post(gw, "/v1/completions", dict(b, prompt="Hello demo world", add_special_tokens=False))
    st2, r2 = fx.post(gw, "/v1/completions", dict(b, prompt=ids_hello))
    fx.check(st1 == 200 and st2 == 200 and r1["choices"][0]["logprobs"]["tokens"] ==
             r2["choices"][0]["logprobs"]["tokens"] and r1["choices"][0]["text"] == r2["choices"][0]["text"],
             f"text vs ids prompt: {str(r1)[:200]} / {str(r2)[:200]}")
    st, ver, r3 = fx.curl_json(gw.url("/v1/completions"), dict(b, prompt=ids_hello), "--http2-prior-knowledge")
    fx.check(st == 200 and ver == "2" and r3["choices"][0]["logprobs"]["tokens"] ==
             r2["choices"][0]["logprobs"]["tokens"], f"h2c: {st} {ver}")
    # a worker whose checkpoint merges 3 x 3 patches per token behind the M3 plugin (2 x 2): text is served,
    # and the gateway says once in its log that media requests will be refused (ModelInfo merge_factor)
    subprocess.run([fx.MKDEMO, "--out", os.path.join(d, "ckpt3"), "--tokenizer", tok, "--set", "merge=3"], check=True,
                   capture_output=True, timeout=120)
    w3 = fx.RealWorker(os.path.join(d, "ckpt3"))
    gw3 = fx.Gateway(fx.model_block("m3-merge3", "m3", tok, [w3.addr]))
    # the check runs on a request that finds the worker's ModelInfo in (its max_context shows as max_model_len):
    # wait for it, or a request racing the first ModelInfo answer would leave nothing to log
    deadline = time.time() + 30
    while time.time() < deadline and not json.loads(fx.get(gw3, "/v1/models/m3-merge3")[1]).get("max_model_len"):
        time.sleep(0.05)
    fx.check(stream_usage(gw3, text, model="m3-merge3") == base, "text through a merge-3 worker")
    try:
        gw3.wait_log(r"worker \S+ makes one media token per 9 patches but plugin m3 per 4", timeout=10)
        warned = True
    except RuntimeError:
        warned = False
    fx.check(warned, "merge mismatch warning in the gateway log")
    fx.check(gw.text().count("media token per") == 0, "no merge warning for the merge-2 worker")


# ---------------------------------------------------------------- API keys

def case_auth():
    """api_key: the API's routes need "Authorization: Bearer KEY" (any configured key), answered 401 in OpenAI's
    shape with WWW-Authenticate otherwise; health and metrics stay open; h2c the same. cors_allow_origin:
    preflights from listed origins answered 204 without a key, responses (401s too) name the origin."""
    d = tempfile.mkdtemp(prefix="mmgw-api-auth-")
    gw, _, _ = toy_setup(d, http_extra="api_key sk-test-one sk-test-two;\n    "
                                        "cors_allow_origin https://app.example.com http://localhost:3000;")
    chat = {"model": "toy", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}

    def call(method, path, body=None, key=None, auth=None, extra=None):
        h = {"content-type": "application/json", **(extra or {})}
        if key is not None:
            h["authorization"] = f"Bearer {key}"
        if auth is not None:
            h["authorization"] = auth
        req = urllib.request.Request(gw.url(path), data=json.dumps(body).encode() if body is not None else None,
                                     headers=h, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read(), {k.lower(): v for k, v in r.headers.items()}
        except urllib.error.HTTPError as e:
            return e.code, e.read(), {k.lower(): v for k, v in e.headers.items()}

    for path, body in (("/v1/chat/completions", chat), ("/v1/completions", {"model": "toy", "prompt": "x",
                                                                           "max_tokens": 1}),
                       ("/tokenize", {"model": "toy", "prompt": "x"}), ("/detokenize", {"model": "toy", "tokens": [1]})):
        for label, kw in (("no key", {}), ("wrong key", {"key": "sk-test-three"}), ("not bearer", {"auth": "Basic eA=="}),
                          ("empty bearer", {"auth": "Bearer "}), ("a key's prefix", {"key": "sk-test-on"})):
            st, txt, h = call("POST", path, body, **kw)
            err = json.loads(txt).get("error", {}) if st == 401 else {}
            fx.check(st == 401 and err.get("code") == "invalid_api_key" and err.get("type") == "invalid_request_error"
                     and h.get("www-authenticate") == "Bearer", f"{path} {label}: {st} {txt[:200]!r} {h}")
        for key in ("sk-test-one", "sk-test-two"):
            st, txt, _ = call("POST", path, body, key=key)
            fx.check(st == 200, f"{path} with {key}: {st} {txt[:200]!r}")
    st, _, _ = call("POST", "/v1/chat/completions", chat, auth="bearer   sk-test-two  ")
    fx.check(st == 200, f"scheme in any case, blanks around the key: {st}")
    for path in ("/v1/models", "/v1/models/toy"):
        fx.check(call("GET", path)[0] == 401 and call("GET", path, key="sk-test-one")[0] == 200, f"GET {path}")
    for path in ("/health", "/health/models", "/metrics"):
        st, _, _ = call("GET", path)
        fx.check(st == 200, f"GET {path} without a key: {st}")
    st, ver, r = fx.curl_json(gw.url("/v1/chat/completions"), chat, "--http2-prior-knowledge")
    fx.check(st == 401 and ver == "2" and r.get("error", {}).get("code") == "invalid_api_key", f"h2c no key: {st} {r}")
    st, ver, r = fx.curl_json(gw.url("/v1/chat/completions"), chat, "--http2-prior-knowledge", "-H",
                              "authorization: Bearer sk-test-one")
    fx.check(st == 200 and ver == "2", f"h2c with the key: {st} {r}")
    st, txt, _ = call("POST", "/v1/chat/completions", dict(chat, stream=True), key="sk-test-one")
    fx.check(st == 200 and b"data: [DONE]" in txt, f"streamed with the key: {st}")
    fx.check("sk-test" not in gw.text(), "a key in the gateway's log")
    # CORS (cors_allow_origin): a browser app's preflight needs no key; its answers name the origin, 401s too
    app = {"origin": "https://app.example.com"}
    st, _, h = call("OPTIONS", "/v1/chat/completions", extra=dict(app, **{
        "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type"}))
    fx.check(st == 204 and h.get("access-control-allow-origin") == "https://app.example.com" and
             "POST" in h.get("access-control-allow-methods", "") and
             h.get("access-control-allow-headers") == "authorization, content-type" and h.get("vary") == "origin"
             and "content-length" not in h, f"preflight from an allowed origin: {st} {h}")
    st, ver, _ = fx.curl_json(gw.url("/v1/chat/completions"), {}, "--http2-prior-knowledge", "-X", "OPTIONS", "-H",
                              "origin: http://localhost:3000", "-H", "access-control-request-method: POST")
    fx.check(st == 204 and ver == "2", f"h2c preflight: {st} {ver}")
    st, _, h = call("OPTIONS", "/v1/chat/completions", extra={"origin": "https://evil.example.com",
                                                              "access-control-request-method": "POST"})
    fx.check(st == 403 and "access-control-allow-origin" not in h, f"preflight from another origin: {st} {h}")
    st, _, h = call("POST", "/v1/chat/completions", chat, key="sk-test-one", extra=app)
    fx.check(st == 200 and h.get("access-control-allow-origin") == "https://app.example.com", f"POST: {st} {h}")
    st, _, h = call("POST", "/v1/chat/completions", chat, extra=app)
    fx.check(st == 401 and h.get("access-control-allow-origin") == "https://app.example.com", f"401: {st} {h}")
    st, _, h = call("POST", "/v1/chat/completions", chat, key="sk-test-one", extra={"origin": "https://evil.example.com"})
    fx.check(st == 200 and "access-control-allow-origin" not in h, f"POST from another origin: {st} {h}")
    st, _, h = call("OPTIONS", "/v1/chat/completions")  # not a preflight (no Origin): no route takes OPTIONS
    fx.check(st == 405, f"OPTIONS without Origin: {st}")
    # without the directive: no CORS headers, OPTIONS stays a 405
    gw2, _, _ = toy_setup(tempfile.mkdtemp(prefix="mmgw-api-auth2-"))
    req = urllib.request.Request(gw2.url("/v1/chat/completions"), method="OPTIONS",
                                 headers={**app, "access-control-request-method": "POST"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            st2, h2 = r.status, {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        st2, h2 = e.code, {k.lower(): v for k, v in e.headers.items()}
    fx.check(st2 == 405 and "access-control-allow-origin" not in h2, f"no cors_allow_origin: {st2} {h2}")


def case_worker_auth():
    """A worker started with --auth-token-file answers only calls carrying "authorization: Bearer" its token:
    the gateway's upstream_token sends it on every call (its own HTTP/2 path and gRPC C core's: health, model
    info, Generate, an image by shared memory); a model with a wrong or no token gets the workers' refusal as
    an error, never an answer; a bad token file stops the worker at start."""
    import grpc
    fx.need_file(fx.MKDEMO, "mmgw-mkdemo")
    d = tempfile.mkdtemp(prefix="mmgw-api-wauth-")
    tok, _, _ = demo_tokenizer(d)
    subprocess.run([fx.MKDEMO, "--out", os.path.join(d, "ckpt"), "--tokenizer", tok], check=True, capture_output=True,
                   timeout=120)
    secret = "s3cr3t-Token_of/the+fleet=="
    tf = os.path.join(d, "token")
    with open(tf, "w") as f:
        f.write(secret + "\n")
    os.chmod(tf, 0o600)
    for content, want in (("", "empty"), ("two words\n", "visible ASCII")):
        bad = os.path.join(d, "bad-token")
        with open(bad, "w") as f:
            f.write(content)
        p = subprocess.run([fx.WORKER, "--model", os.path.join(d, "ckpt"), "--listen", "127.0.0.1:0",
                            "--auth-token-file", bad], capture_output=True, timeout=120)
        err = p.stderr.decode(errors="replace")
        fx.check(p.returncode != 0 and want in err and "bad-token" in err,
                 f"worker with a token file {content!r}: exit {p.returncode}, {err[-300:]!r}")
    w = fx.RealWorker(os.path.join(d, "ckpt"), extra=("--auth-token-file", tf))

    # the protocol itself: without the header, with a wrong one, with the right one
    pb2, pb2_grpc = fx.grpc_stubs()
    stub = pb2_grpc.WorkerStub(grpc.insecure_channel(w.addr))
    for md, ok in (((), False), ((("authorization", "Bearer wrong"),), False),
                   ((("authorization", secret),), False), ((("authorization", "Bearer " + secret),), True)):
        try:
            stub.Health(pb2.HealthRequest(), timeout=5, metadata=md)
            got = True
        except grpc.RpcError as e:
            got = False
            fx.check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"Health with {md}: {e.code()} {e.details()}")
        fx.check(got == ok, f"Health with {md}: answered {got}, expected {ok}")

    chat = {"max_tokens": 3, "messages": [{"role": "user", "content": "hello"}]}
    img = {"max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": fx.data_url_bytes(png_bytes(640, 480))}}]}]}
    models = (fx.model_block("good", "m3", tok, [w.addr], f"upstream_token {secret};") +
              fx.model_block("wrong", "m3", tok, [w.addr], "upstream_token nope;\n    retries 0;") +
              fx.model_block("none", "m3", tok, [w.addr], "retries 0;"))
    for transport in ("loop", "grpc-core"):
        old = os.environ.get("MMGW_UPSTREAM_TRANSPORT")
        if transport == "grpc-core":
            os.environ["MMGW_UPSTREAM_TRANSPORT"] = "grpc-core"
        try:
            gw = fx.Gateway(models)
        finally:
            if old is None:
                os.environ.pop("MMGW_UPSTREAM_TRANSPORT", None)
            else:
                os.environ["MMGW_UPSTREAM_TRANSPORT"] = old
        for body in (chat, img):
            st, r = fx.post(gw, "/v1/chat/completions", dict(body, model="good"))
            fx.check(st == 200 and isinstance(r, dict) and r["usage"]["completion_tokens"] >= 1,
                     f"{transport}: model with the token: {st} {str(r)[:300]}")
        for m in ("wrong", "none"):
            st, r = fx.post(gw, "/v1/chat/completions", dict(chat, model=m))
            fx.check(st >= 500 and fx.is_error(r), f"{transport}: model {m}: {st} {str(r)[:300]}")
        fx.check("UNAUTHENTICATED" in gw.text(), f"{transport}: the gateway log names the refusal")
        fx.check(secret not in gw.text(), f"{transport}: the token appears in the gateway's log")
        gw.stop()
    fx.check(secret not in w.text(), "the token appears in the worker's log")


def case_worker_tls():
    """A worker started with --tls-cert/--tls-key serves TLS only; the gateway's upstream_tls reaches it
    through gRPC C core, verifying its certificate against upstream_tls_ca (by the address's IP, or by
    upstream_tls_name), with the token on top; plaintext or another CA gets no answer; mmgw -t and the worker
    name a bad setting."""
    import grpc
    fx.need_file(fx.MKDEMO, "mmgw-mkdemo")
    if not shutil.which("openssl"):
        fx.skip("openssl is not installed")
    d = tempfile.mkdtemp(prefix="mmgw-api-wtls-")
    tok, _, _ = demo_tokenizer(d)
    ckpt = os.path.join(d, "ckpt")
    subprocess.run([fx.MKDEMO, "--out", ckpt, "--tokenizer", tok], check=True, capture_output=True, timeout=120)
    crt, key = fx.make_cert(d)
    other = os.path.join(d, "other")
    os.makedirs(other)
    other_crt, _ = fx.make_cert(other)
    tf = os.path.join(d, "token")
    with open(tf, "w") as f:
        f.write("tls-and-token\n")
    os.chmod(tf, 0o600)
    for extra, want in ((("--tls-cert", crt), "go together"), (("--tls-cert", crt, "--tls-key", crt), "PRIVATE KEY"),
                        (("--tls-cert", key, "--tls-key", key), "CERTIFICATE")):
        p = subprocess.run([fx.WORKER, "--model", ckpt, "--listen", "127.0.0.1:0", *extra], capture_output=True,
                           timeout=120)
        err = p.stderr.decode(errors="replace")
        fx.check(p.returncode != 0 and want in err, f"worker {extra}: exit {p.returncode}, {err[-300:]!r}")
    w = fx.RealWorker(ckpt, extra=("--tls-cert", crt, "--tls-key", key, "--auth-token-file", tf))

    pb2, pb2_grpc = fx.grpc_stubs()
    with open(crt, "rb") as f:
        roots = f.read()
    md = (("authorization", "Bearer tls-and-token"),)
    stub = pb2_grpc.WorkerStub(grpc.secure_channel(w.addr, grpc.ssl_channel_credentials(root_certificates=roots)))
    fx.check(stub.Health(pb2.HealthRequest(), timeout=10, metadata=md) is not None, "Health over TLS")
    try:
        pb2_grpc.WorkerStub(grpc.insecure_channel(w.addr)).Health(pb2.HealthRequest(), timeout=5, metadata=md)
        fx.check(False, "a plaintext call to the TLS worker was answered")
    except grpc.RpcError as e:
        fx.check(e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED),
                 f"plaintext call: {e.code()}")

    chat = {"max_tokens": 3, "messages": [{"role": "user", "content": "hello"}]}
    img = {"max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": fx.data_url_bytes(png_bytes(640, 480))}}]}]}
    by_name = "localhost:" + w.addr.split(":")[1]
    tls = "upstream_token tls-and-token;\n    upstream_tls on;\n    "
    models = (fx.model_block("tls", "m3", tok, [w.addr], tls + f"upstream_tls_ca {crt};") +
              fx.model_block("named", "m3", tok, [w.addr], tls + f"upstream_tls_ca {crt};\n    upstream_tls_name localhost;") +
              fx.model_block("host", "m3", tok, [by_name], tls + f"upstream_tls_ca {crt};") +
              fx.model_block("plain", "m3", tok, [w.addr], "upstream_token tls-and-token;\n    retries 0;") +
              fx.model_block("otherca", "m3", tok, [w.addr], tls + f"upstream_tls_ca {other_crt};\n    retries 0;"))
    gw = fx.Gateway(models)
    for m in ("tls", "named", "host"):
        for body in (chat, img):
            st, r = fx.post(gw, "/v1/chat/completions", dict(body, model=m))
            fx.check(st == 200 and isinstance(r, dict) and r["usage"]["completion_tokens"] >= 1,
                     f"model {m} over TLS: {st} {str(r)[:300]}")
    for m in ("plain", "otherca"):
        st, r = fx.post(gw, "/v1/chat/completions", dict(chat, model=m), timeout=60)
        fx.check(st >= 500 and fx.is_error(r), f"model {m}: {st} {str(r)[:300]}")
    gw.stop()

    # mmgw -t: the file and line of a bad TLS setting
    for extra, want in (("upstream_tls_ca /nonexistent/ca.pem;\n    upstream_tls on;", "nonexistent"),
                        (f"upstream_tls_ca {crt};", "need upstream_tls on"),
                        (f"upstream_tls on;\n    upstream_tls_ca {key};", "no PEM certificate")):
        conf = os.path.join(d, "t.conf")
        with open(conf, "w") as f:
            f.write("http {\n    listen 127.0.0.1:0;\n}\n" + fx.model_block("m", "m3", tok, [w.addr], extra))
        p = subprocess.run([fx.MMGW, "-t", "-c", conf], capture_output=True, timeout=60)
        out = (p.stdout + p.stderr).decode(errors="replace")
        fx.check(p.returncode != 0 and want in out and "t.conf:" in out, f"mmgw -t with {extra!r}: {out[-300:]!r}")


CASES = {
    "golden_h1": case_golden_h1, "golden_h2": case_golden_h2, "tokenize": case_tokenize,
    "media_tokens": case_media_tokens, "errors": case_errors, "toy": case_toy, "disconnect": case_disconnect,
    "failover": case_failover, "media_time": case_media_time, "parse": case_parse, "qwen2vl": case_qwen2vl, "robust": case_robust, "backpressure": case_backpressure, "reload": case_reload, "metrics": case_metrics,
    "demo": case_demo, "surface": case_surface, "conftest": case_conftest, "auth": case_auth,
    "worker_auth": case_worker_auth, "worker_tls": case_worker_tls,
}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(__doc__)
        sys.exit(2)
    try:
        CASES[sys.argv[1]]()
    except Exception:
        import traceback
        traceback.print_exc()
        fx.FAILURES.append("exception")
    fx.finish()
