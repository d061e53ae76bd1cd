#!/usr/bin/python3
"""skip_special_tokens / spaces_between_special_tokens through the real gateway.

A scripted worker (tests/integration/api/script_worker.py, loopback only) emits token ids that put a special
token in the middle of the text, inside a UTF-8 character, and around M3's reasoning and tool-call markers;
the answers are checked for chat and completions, streamed and not, against what vLLM returns: special tokens
dropped by default and kept with skip_special_tokens=false, logprobs tokens showing the raw token text, and
the markers the M3 parser reads reaching it even when the tokenizer marks them special.
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "api"))
import api_fixture as fx  # noqa: E402
import test_api as ta  # noqa: E402

NS = "]<]minimax[>["
MARKERS = ("<mm:think>", "</mm:think>", NS, "<tool_call>", "</tool_call>")


def chat(gw, **kw):
    body = {"model": "m3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}
    body.update(kw)
    return body


def complete(gw, **kw):
    body = {"model": "m3", "prompt": "hi", "max_tokens": 100}
    body.update(kw)
    return body


def joined(events, field):
    """Concatenated delta field (chat) or text (completions) of a streamed answer, and the finish reasons."""
    out, finish = "", []
    for e in events[:-1]:
        c = json.loads(e)["choices"][0]
        out += (c["delta"].get(field) or "") if "delta" in c else (c.get("text") or "")
        if c.get("finish_reason"):
            finish.append(c["finish_reason"])
    return out, finish


def answer(gw, path, body, field="content"):
    """(non-streamed text, streamed text) of one request; failures are recorded."""
    st, r = fx.post(gw, path, body)
    if not fx.check(st == 200, f"{path} {body.get('skip_special_tokens')}: {st} {str(r)[:300]}"):
        return None, None
    c = r["choices"][0]
    whole = c["message"][field] if path.endswith("chat/completions") else c["text"]
    st, ev = fx.sse_events(gw, path, dict(body, stream=True))
    if not fx.check(st == 200 and isinstance(ev, list) and ev[-1] == "[DONE]", f"{path} streamed: {st} {str(ev)[:300]}"):
        return whole, None
    streamed, finish = joined(ev, field)
    fx.check(finish == ["stop"], f"{path} streamed finish: {finish}")
    return whole, streamed


def main():
    d = tempfile.mkdtemp(prefix="mmgw-special-")
    tok, ids, vocab = ta.demo_tokenizer(d)
    with open(tok) as f:
        tj = json.load(f)
    special = {a["content"] for a in tj["added_tokens"] if a["special"]}
    pad = "]!d~["
    fx.check(pad in special and "[e~[" in special, f"the demo tokenizer marks {pad} and [e~[ special")
    # the same tokenizer with the parser's markers marked special (whether M3's own file does is unverified)
    for a in tj["added_tokens"]:
        if a["content"] in MARKERS:
            a["special"] = True
    tok_sp = os.path.join(d, "tokenizer-special-markers.json")
    with open(tok_sp, "w") as f:
        json.dump(tj, f)

    sw = ta.ScriptWorker(d, vocab, ids["[e~["])
    gw = fx.Gateway(fx.model_block("m3", "m3", tok, [sw.addr], "retries 0;") +
                    fx.model_block("m3sp", "m3", tok_sp, [sw.addr], "retries 0;"))
    byte_id = {b: i for i, b in ta.token_bytes(tok).items() if len(b) == 1}
    eos = ids["[e~["]

    # a special token mid-text, and one inside "é" (its two bytes as separate tokens)
    text_ids = ta.tokenize(gw, "Hello", model="m3") + [ids[pad]] + ta.tokenize(gw, " caf", model="m3") + [byte_id[b"\xc3"], ids[pad],
                                                                                 byte_id[b"\xa9"]] + [eos]
    sw.set(text_ids)
    for path, mk in (("/v1/chat/completions", chat), ("/v1/completions", complete)):
        for flags, want in (({}, "Hello café"), ({"skip_special_tokens": True}, "Hello café"),
                            ({"skip_special_tokens": False}, f"Hello{pad} caf\ufffd{pad}\ufffd"),
                            ({"spaces_between_special_tokens": False}, "Hello café"),
                            ({"skip_special_tokens": False, "spaces_between_special_tokens": False},
                             f"Hello{pad} caf\ufffd{pad}\ufffd")):
            whole, streamed = answer(gw, path, mk(gw, **flags))
            fx.check(whole == want, f"{path} {flags}: {whole!r}, want {want!r}")
            fx.check(streamed == want, f"{path} {flags} streamed: {streamed!r}, want {want!r}")

    # logprobs keep the raw token text of the dropped special token (vLLM), the text does not show it
    st, r = fx.post(gw, "/v1/chat/completions", chat(gw, logprobs=True))
    if fx.check(st == 200, f"chat logprobs: {st} {str(r)[:300]}"):
        toks = [t["token"] for t in r["choices"][0]["logprobs"]["content"]] if r["choices"][0]["logprobs"] else []
        fx.check(r["choices"][0]["message"]["content"] == "Hello café", f"chat logprobs text: {r['choices'][0]}")
        # the script worker sends no logprob values: the gateway then lists no entries; accept either, but a
        # listed entry for the pad must be its raw text
        fx.check(all(t != "" for t in toks) and (not toks or pad in toks), f"chat logprobs tokens: {toks}")
    st, r = fx.post(gw, "/v1/completions", complete(gw, logprobs=1))
    if fx.check(st == 200, f"completion logprobs: {st} {str(r)[:300]}"):
        fx.check(r["choices"][0]["text"] == "Hello café", f"completion logprobs text: {r['choices'][0]}")

    # a stop string that only exists with the special token shown
    st, r = fx.post(gw, "/v1/completions", complete(gw, stop=[f"{pad} caf"], skip_special_tokens=False))
    fx.check(st == 200 and r["choices"][0]["text"] == "Hello", f"stop across a kept special token: {str(r)[:300]}")
    st, r = fx.post(gw, "/v1/completions", complete(gw, stop=["o c"]))
    fx.check(st == 200 and r["choices"][0]["text"] == "Hell", f"stop across a dropped special token: {str(r)[:300]}")

    # wrong types are a 400 naming the field
    for k in ("skip_special_tokens", "spaces_between_special_tokens"):
        for path, mk in (("/v1/chat/completions", chat), ("/v1/completions", complete)):
            st, r = fx.post(gw, path, mk(gw, **{k: "yes"}))
            fx.check(st == 400 and fx.is_error(r, param=k), f"{path} {k}='yes': {st} {str(r)[:300]}")

    # M3's reasoning and tool-call markers reach the parser with skip_special_tokens on, also when the tokenizer
    # marks them special; a real special token between them is still dropped
    out_text = ("<mm:think>Think first.</mm:think>Let me check." + NS + "<tool_call>\n" + NS +
                '<invoke name="get_weather">' + NS + "<city>Paris" + NS + "</city>" + NS + "</invoke>\n" + NS +
                "</tool_call>")
    for model in ("m3", "m3sp"):
        mid = ta.tokenize(gw, out_text, model=model)
        if model == "m3sp":
            sp_ids = {ids[m] for m in MARKERS}
            fx.check(sum(1 for i in mid if i in sp_ids) >= 8, f"{model}: the markers are single special ids: {mid}")
        cut = mid.index(ta.tokenize(gw, "Let", model=model)[0])
        sw.set(mid[:cut] + [ids[pad]] + mid[cut:] + [eos])
        body = chat(gw, model=model, tools=[ta.WEATHER_TOOL])
        st, r = fx.post(gw, "/v1/chat/completions", body)
        if fx.check(st == 200, f"{model} tool chat: {st} {str(r)[:300]}"):
            m = r["choices"][0]["message"]
            calls = m.get("tool_calls") or []
            fx.check(m.get("reasoning_content") == "Think first." and m["content"] == "Let me check." and
                     len(calls) == 1 and calls[0]["function"]["name"] == "get_weather" and
                     json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"} and
                     r["choices"][0]["finish_reason"] == "tool_calls", f"{model} parsed: {json.dumps(m)[:400]}")
        st, ev = fx.sse_events(gw, "/v1/chat/completions", dict(body, stream=True))
        if fx.check(st == 200 and ev[-1] == "[DONE]", f"{model} tool stream: {st} {str(ev)[:300]}"):
            reasoning, _ = joined(ev, "reasoning_content")
            content, _ = joined(ev, "content")
            fx.check(reasoning == "Think first." and content == "Let me check.",
                     f"{model} streamed: {reasoning!r} {content!r}")
        # without tools the tool markup is content, shown as text (markers kept, the pad dropped)
        st, r = fx.post(gw, "/v1/chat/completions", chat(gw, model=model))
        visible = out_text[out_text.index("</mm:think>") + len("</mm:think>"):]
        fx.check(st == 200 and r["choices"][0]["message"]["content"] == visible,
                 f"{model} no tools: {str(r)[:400]}")
        # completions have no parser: with skip on, special markers are dropped like any special token
        st, r = fx.post(gw, "/v1/completions", complete(gw, model=model))
        plain = out_text.replace(NS, "").replace("<mm:think>", "").replace("</mm:think>", "")
        plain = plain.replace("<tool_call>", "").replace("</tool_call>", "")
        want = plain if model == "m3sp" else out_text
        fx.check(st == 200 and r["choices"][0]["text"] == want, f"{model} completion: {str(r)[:400]}, want {want!r}")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback
        traceback.print_exc()
        fx.FAILURES.append("exception")
    fx.finish()
