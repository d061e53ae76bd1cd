#!/usr/bin/python3
"""A small, independent reference implementation of HF `tokenizers` byte-level BPE encoding.

It exists for two reasons: as the baseline of bench/tokenizer (HF tokenizers itself is not
installable offline here), and as a second implementation for differential tests of the C
tokenizer. It follows HF's pipeline: added tokens (leftmost-longest, lstrip/rstrip/single_word),
normalizer (NFC or none), pre-tokenizer (Split regex / ByteLevel), BPE by merge rank, and
ByteLevel decoding with Python's 'replace' error handler (the same maximal-subpart rule as
Rust's String::from_utf8_lossy). Only the tokenizer.json shapes the C code supports are handled.
Needs python3-regex (Oniguruma-like \\p{..} classes and Unicode \\s)."""
import json
import sys
import unicodedata

import regex

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE2CHAR = bytes_to_unicode()
CHAR2BYTE = {c: b for b, c in BYTE2CHAR.items()}


def is_word_char(c):
    # Rust regex \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
    return regex.match(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]", c) is not None


def is_ws(c):
    return regex.match(r"\s", c) is not None


class Tokenizer:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        m = t["model"]
        assert m["type"] == "BPE"
        self.vocab = m["vocab"]
        self.id2tok = {i: s for s, i in self.vocab.items()}
        self.ignore_merges = bool(m.get("ignore_merges", False))
        self.merges = {}
        for rank, mg in enumerate(m["merges"]):
            a, b = mg.split(" ") if isinstance(mg, str) else mg
            self.merges[(a, b)] = rank
        self.added = {}  # content -> token dict
        self.added_by_id = {}
        for at in t.get("added_tokens") or []:
            self.added[at["content"]] = at
            self.added_by_id[at["id"]] = at
        self.special = {c for c, at in self.added.items() if at.get("special")}
        self.normalizers = self._flatten(t.get("normalizer"), "normalizers")
        self.pretoks = self._flatten(t.get("pre_tokenizer"), "pretokenizers")
        self.post = t.get("post_processor")
        self.cache = {}
        self.regexes = {}

    @staticmethod
    def _flatten(node, key):
        if node is None:
            return []
        if node["type"] == "Sequence":
            out = []
            for n in node[key]:
                out += Tokenizer._flatten(n, key)
            return out
        return [node]

    def normalize(self, s):
        for n in self.normalizers:
            if n["type"] in ("NFC", "NFD", "NFKC", "NFKD"):
                s = unicodedata.normalize(n["type"], s)
            else:
                raise ValueError("unsupported normalizer " + n["type"])
        return s

    def _find_added(self, s, tokens):
        """HF AddedVocabulary::find_matches: leftmost-longest, then the per-token flags."""
        if not tokens:
            return [(None, s)]
        key = id(tokens)
        rx = self.regexes.get(key)
        if rx is None:
            # alternatives longest first: at one position the longest token wins, as in leftmost-longest
            alts = sorted(tokens, key=len, reverse=True)
            rx = self.regexes[key] = regex.compile("|".join(regex.escape(t) for t in alts))
        out, start_offset = [], 0
        for m in rx.finditer(s):
            start, stop = m.start(), m.end()
            at = tokens[m.group(0)]
            if at.get("single_word"):
                ok_l = start == 0 or not is_word_char(s[start - 1])
                ok_r = stop == len(s) or not is_word_char(s[stop])
                if not (ok_l and ok_r):
                    continue
            if at.get("lstrip"):
                ns = start
                while ns > 0 and is_ws(s[ns - 1]):
                    ns -= 1
                start = max(ns, start_offset)
            if at.get("rstrip"):
                while stop < len(s) and is_ws(s[stop]):
                    stop += 1
            if start_offset < start:
                out.append((None, s[start_offset:start]))
            out.append((at["id"], s[start:stop]))
            start_offset = stop
        if start_offset != len(s):
            out.append((None, s[start_offset:]))
        return out

    def _split(self, piece, pt):
        if pt["type"] == "Split":
            pat = pt["pattern"]
            rx = pat["Regex"] if "Regex" in pat else regex.escape(pat["String"])
            r = self.regexes.get(rx)
            if r is None:
                r = self.regexes[rx] = regex.compile(rx)
            matches, prev = [], 0
            for m in r.finditer(piece):
                if m.start() != prev:
                    matches.append(((prev, m.start()), False))
                matches.append(((m.start(), m.end()), True))
                prev = m.end()
            if prev != len(piece):
                matches.append(((prev, len(piece)), False))
            if pt.get("invert"):
                matches = [(o, not f) for o, f in matches]
            beh = pt["behavior"]
            if beh == "Isolated":
                res = [o for o, _ in matches]
            elif beh == "Removed":
                res = [o for o, f in matches if not f]
            else:
                raise ValueError("behavior " + beh)
            return [piece[a:b] for a, b in res if b > a]
        if pt["type"] == "ByteLevel":
            if pt.get("add_prefix_space") and not piece.startswith(" "):
                piece = " " + piece
            if pt.get("use_regex", True):
                return self._split(piece, {"type": "Split", "pattern": {"Regex": GPT2_PATTERN},
                                           "behavior": "Isolated"})
            return [piece]
        raise ValueError("unsupported pre_tokenizer " + pt["type"])

    def bpe(self, word):
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        hit = self.cache.get(word)
        if hit is not None:
            return hit
        syms = [c for c in word if c in self.vocab]
        while len(syms) > 1:
            best, bi = None, -1
            for i in range(len(syms) - 1):
                r = self.merges.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            syms[bi:bi + 2] = [syms[bi] + syms[bi + 1]]
        ids = [self.vocab[s] for s in syms]
        self.cache[word] = ids
        return ids

    def encode(self, text, add_special_tokens=False):
        if not hasattr(self, "_raw"):
            self._raw = {c: a for c, a in self.added.items() if not a.get("normalized", True)}
            self._norm = {self.normalize(c): a for c, a in self.added.items() if a.get("normalized", True)}
        raw, norm = self._raw, self._norm
        ids = []
        for tid, piece in self._find_added(text, raw):
            if tid is not None:
                ids.append(tid)
                continue
            for tid2, p2 in self._find_added(self.normalize(piece), norm):
                if tid2 is not None:
                    ids.append(tid2)
                    continue
                pieces = [p2] if p2 else []
                for pt in self.pretoks:
                    pieces = [q for p in pieces for q in self._split(p, pt)]
                for p in pieces:
                    mapped = "".join(BYTE2CHAR[b] for b in p.encode("utf-8"))
                    ids += self.bpe(mapped)
        if add_special_tokens and self.post and self.post["type"] == "TemplateProcessing":
            out = []
            for item in self.post["single"]:
                if "SpecialToken" in item:
                    out += self.post["special_tokens"][item["SpecialToken"]["id"]]["ids"]
                else:
                    out += ids
            ids = out
        return ids

    def token_str(self, i):
        if i in self.added_by_id:
            return self.added_by_id[i]["content"]
        return self.id2tok.get(i)

    def decode_bytes(self, ids, skip_special=False):
        out = bytearray()
        for i in ids:
            s = self.token_str(i)
            if s is None or (skip_special and s in self.special):
                continue
            if all(c in CHAR2BYTE for c in s):
                out += bytes(CHAR2BYTE[c] for c in s)
            else:
                out += s.encode("utf-8")
        return bytes(out)

    def decode(self, ids, skip_special=False):
        return self.decode_bytes(ids, skip_special).decode("utf-8", "replace")


if __name__ == "__main__":
    tok = Tokenizer(sys.argv[1])
    for line in sys.stdin:
        print(json.dumps(tok.encode(json.loads(line))))
