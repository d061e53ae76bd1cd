/* BPE merges. HF repeatedly merges the adjacent pair with the lowest rank, the leftmost one among equal
 * ranks (a min-heap on (rank, position) with stale entries skipped). Two implementations give exactly
 * that order: a linear scan with a cached rank per pair, fastest for the short words of natural text,
 * and HF's heap with a linked list of symbols for long runs (repeated characters, base64, minified code)
 * where the scan would be quadratic. */
#include <stdlib.h>
#include <string.h>

#include "gw_tok_internal.h"

#define SCAN_MAX 64 /* words up to this many symbols use the linear scan */

size_t gw_tok_bpe_merge_scan(const struct gw_tok_mergemap *m, uint32_t *sym, size_t n)
{
    if (n < 2) return n;
    if (n > SCAN_MAX) return gw_tok_bpe_merge_heap(m, sym, n, NULL);
    uint32_t rank[SCAN_MAX], nid[SCAN_MAX];
    for (size_t i = 0; i + 1 < n; i++) {
        const struct gw_tok_mergeslot *s = gw_tok_mergemap_get(m, sym[i], sym[i + 1]);
        rank[i] = s ? s->rank : UINT32_MAX;
        nid[i] = s ? s->id : 0;
    }
    for (;;) {
        uint32_t best = UINT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (rank[i] < best) {
                best = rank[i];
                bi = i;
            }
        if (best == UINT32_MAX) break;
        sym[bi] = nid[bi];
        n--;
        memmove(sym + bi + 1, sym + bi + 2, (n - bi - 1) * sizeof *sym);
        if (bi + 1 < n) {
            memmove(rank + bi + 1, rank + bi + 2, (n - bi - 2) * sizeof *rank);
            memmove(nid + bi + 1, nid + bi + 2, (n - bi - 2) * sizeof *nid);
        }
        for (size_t i = bi ? bi - 1 : 0; i <= bi && i + 1 < n; i++) {
            const struct gw_tok_mergeslot *s = gw_tok_mergemap_get(m, sym[i], sym[i + 1]);
            rank[i] = s ? s->rank : UINT32_MAX;
            nid[i] = s ? s->id : 0;
        }
        if (n < 2) break;
    }
    return n;
}

/* ---- heap variant ---- */

struct hent {
    uint32_t rank, pos, id;
};

static int hless(const struct hent *a, const struct hent *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void hpush(struct hent *h, size_t *n, struct hent e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static struct hent hpop(struct hent *h, size_t *n)
{
    struct hent top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && hless(&h[c + 1], &h[c])) c++;
        if (!hless(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

size_t gw_tok_bpe_heap_scratch(size_t n)
{
    /* prev, next (int32) + alive flags + heap of 3n entries */
    return n * (2 * sizeof(int32_t) + 1) + 3 * n * sizeof(struct hent) + 16;
}

size_t gw_tok_bpe_merge_heap(const struct gw_tok_mergemap *m, uint32_t *sym, size_t n, void *scratch)
{
    if (n < 2) return n;
    void *own = NULL;
    if (!scratch) {
        scratch = own = malloc(gw_tok_bpe_heap_scratch(n));
        if (!scratch) return SIZE_MAX;
    }
    struct hent *heap = scratch;
    int32_t *prev = (int32_t *)(void *)(heap + 3 * n);
    int32_t *next = prev + n;
    uint8_t *alive = (uint8_t *)(next + n);
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        alive[i] = 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const struct gw_tok_mergeslot *s = gw_tok_mergemap_get(m, sym[i], sym[i + 1]);
        if (s) hpush(heap, &hn, (struct hent){s->rank, (uint32_t)i, s->id});
    }
    while (hn) {
        struct hent top = hpop(heap, &hn);
        uint32_t p = top.pos;
        if (!alive[p] || next[p] < 0) continue;
        uint32_t q = (uint32_t)next[p];
        /* a stale entry: the pair at p changed since it was queued */
        const struct gw_tok_mergeslot *s = gw_tok_mergemap_get(m, sym[p], sym[q]);
        if (!s || s->id != top.id) continue;
        sym[p] = top.id;
        alive[q] = 0;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = (int32_t)p;
        if (prev[p] >= 0) {
            uint32_t l = (uint32_t)prev[p];
            s = gw_tok_mergemap_get(m, sym[l], sym[p]);
            if (s) hpush(heap, &hn, (struct hent){s->rank, l, s->id});
        }
        if (next[p] >= 0) {
            s = gw_tok_mergemap_get(m, sym[p], sym[next[p]]);
            if (s) hpush(heap, &hn, (struct hent){s->rank, p, s->id});
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (alive[i]) sym[k++] = sym[i];
    free(own);
    return k;
}

size_t gw_tok_bpe_merge(const struct gw_tok_mergemap *m, uint32_t *sym, size_t n, struct gw_tok_tls *tls)
{
    if (n <= SCAN_MAX) return gw_tok_bpe_merge_scan(m, sym, n);
    size_t need = gw_tok_bpe_heap_scratch(n);
    if (need > tls->heap_cap) {
        void *h = malloc(need);
        if (!h) return SIZE_MAX;
        free(tls->heap);
        tls->heap = h;
        tls->heap_cap = need;
    }
    return gw_tok_bpe_merge_heap(m, sym, n, tls->heap);
}

int32_t gw_tok_bpe_word(const struct gw_tokenizer *tok, struct gw_tok_tls *tls, const uint8_t *s, size_t n,
                        struct gw_tok_ids *out, struct mm_err *err)
{
    if (n == 0) return MM_OK;
    if (n == 1) {
        uint32_t id = tok->byte_id[s[0]];
        if (id != GW_TOK_NONE && gw_tok_ids_push(out, id)) goto nomem;
        return MM_OK;
    }
    if (tok->ignore_merges) {
        uint32_t id = gw_tok_strmap_get(&tok->raw_vocab, s, n);
        if (id != GW_TOK_NONE)
            return gw_tok_ids_push(out, id) ? mm_err_set(err, MM_NOMEM, "encode: out of memory") : MM_OK;
    }
    uint64_t h = gw_tok_hash_bytes(s, n);
    size_t nc;
    const uint32_t *hit = gw_tok_cache_get(&tls->cache, h, s, n, &nc);
    if (hit) {
        if (!nc) return MM_OK;
        if (gw_tok_ids_reserve(out, nc)) goto nomem;
        memcpy(out->ids + out->n, hit, nc * sizeof *hit);
        out->n += nc;
        return MM_OK;
    }
    if (n > tls->sym_cap) {
        size_t cap = n < 256 ? 256 : n;
        uint32_t *ns = realloc(tls->sym, cap * sizeof *ns);
        if (!ns) goto nomem;
        tls->sym = ns;
        tls->sym_cap = cap;
    }
    uint32_t *sym = tls->sym;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = tok->byte_id[s[i]];
        if (id != GW_TOK_NONE) sym[k++] = id; /* HF drops characters missing from the vocab (no unk) */
    }
    k = gw_tok_bpe_merge(&tok->merges, sym, k, tls);
    if (k == SIZE_MAX || gw_tok_ids_reserve(out, k)) goto nomem;
    if (k) memcpy(out->ids + out->n, sym, k * sizeof *sym);
    out->n += k;
    gw_tok_cache_put(&tls->cache, h, s, n, sym, k);
    return MM_OK;
nomem:
    return mm_err_set(err, MM_NOMEM, "encode: out of memory");
}
