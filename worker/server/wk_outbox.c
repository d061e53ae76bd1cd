/* Pending Generate messages with chunk coalescing (see wk_outbox.h). */
#include "wk_outbox.h"

#include <stdlib.h>
#include <string.h>

#include "worker.pb-c.h"

struct wk_outmsg {
    struct wk_outmsg *next;
    int32_t is_complete;
    int32_t index;
    /* chunk */
    uint32_t *ids;
    float *lps;        /* [n] when the request wants log-probs */
    uint32_t *top_ids; /* [n * top_n] */
    float *top_lps;
    int32_t n, cap, top_n, has_lp;
    /* complete (alone, or after a chunk's tokens when the outbox merges) */
    int32_t has_done;
    struct wk_complete_ev done;
};

void wk_outbox_init(struct wk_outbox *o)
{
    memset(o, 0, sizeof(*o));
}

/* The choice's last pending message, or NULL. */
static struct wk_outmsg *last_of(struct wk_outbox *o, int32_t index)
{
    struct wk_outmsg *m = NULL;
    for (struct wk_outmsg *p = o->head; p; p = p->next)
        if (p->index == index) m = p;
    return m;
}

static void msg_free(struct wk_outmsg *m)
{
    free(m->ids);
    free(m->lps);
    free(m->top_ids);
    free(m->top_lps);
    free(m);
}

void wk_outbox_clear(struct wk_outbox *o)
{
    while (o->head) {
        struct wk_outmsg *m = o->head;
        o->head = m->next;
        msg_free(m);
    }
    o->tail = NULL;
    o->count = 0;
}

static void append(struct wk_outbox *o, struct wk_outmsg *m)
{
    m->next = NULL;
    if (o->tail)
        o->tail->next = m;
    else
        o->head = m;
    o->tail = m;
    o->count++;
}

/* Room for `more` tokens in a chunk message. */
static int32_t grow(struct wk_outmsg *m, int32_t more)
{
    if (m->n + more <= m->cap) return 0;
    int32_t cap = m->cap ? m->cap : 4;
    while (cap < m->n + more) cap *= 2;
    uint32_t *ids = realloc(m->ids, (size_t)cap * sizeof(uint32_t));
    if (!ids) return -1;
    m->ids = ids;
    if (m->has_lp) {
        float *l = realloc(m->lps, (size_t)cap * sizeof(float));
        if (!l) return -1;
        m->lps = l;
    }
    if (m->top_n) {
        uint32_t *ti = realloc(m->top_ids, (size_t)cap * (size_t)m->top_n * sizeof(uint32_t));
        if (!ti) return -1;
        m->top_ids = ti;
        float *tl = realloc(m->top_lps, (size_t)cap * (size_t)m->top_n * sizeof(float));
        if (!tl) return -1;
        m->top_lps = tl;
    }
    m->cap = cap;
    return 0;
}

int32_t wk_outbox_add_chunk(struct wk_outbox *o, const struct wk_chunk_ev *ev)
{
    struct wk_outmsg *m = last_of(o, ev->index);
    int32_t top_n = ev->top_n > 0 ? ev->top_n : 0;
    if (!m || m->is_complete || m->has_done || m->has_lp != (ev->logprobs != NULL) || m->top_n != top_n) {
        m = calloc(1, sizeof(*m));
        if (!m) return -1;
        m->index = ev->index;
        m->has_lp = ev->logprobs != NULL;
        m->top_n = top_n;
        if (grow(m, ev->n > 0 ? ev->n : 1) != 0) {
            msg_free(m);
            return -1;
        }
        append(o, m);
    } else if (grow(m, ev->n) != 0) {
        return -1;
    }
    for (int32_t i = 0; i < ev->n; i++) {
        m->ids[m->n + i] = (uint32_t)ev->ids[i];
        if (m->has_lp) m->lps[m->n + i] = ev->logprobs[i];
        for (int32_t k = 0; k < top_n; k++) {
            m->top_ids[(size_t)(m->n + i) * top_n + k] = (uint32_t)ev->top_ids[i * top_n + k];
            m->top_lps[(size_t)(m->n + i) * top_n + k] = ev->top_logprobs[i * top_n + k];
        }
    }
    m->n += ev->n;
    return 0;
}

int32_t wk_outbox_add_complete(struct wk_outbox *o, const struct wk_complete_ev *ev)
{
    struct wk_outmsg *m = o->merge_complete ? last_of(o, ev->index) : NULL;
    if (m && !m->is_complete && !m->has_done) {
        /* one message instead of two: the chunk carries its choice's end */
        m->has_done = 1;
        m->done = *ev;
        return 0;
    }
    m = calloc(1, sizeof(*m));
    if (!m) return -1;
    m->is_complete = 1;
    m->has_done = 1;
    m->index = ev->index;
    m->done = *ev; /* finish_reason points at a string literal of the scheduler */
    append(o, m);
    return 0;
}

static void complete_fill(Mmgw__Worker__V1__GenerateComplete *cp, const struct wk_outmsg *m)
{
    cp->index = (uint32_t)m->index;
    cp->finish_reason = (char *)m->done.finish_reason;
    cp->prompt_tokens = (uint32_t)m->done.prompt_tokens;
    cp->completion_tokens = (uint32_t)m->done.completion_tokens;
    cp->cached_tokens = (uint32_t)m->done.cached_tokens;
    if (m->done.has_matched_stop) {
        cp->has_matched_stop_token_case =
            MMGW__WORKER__V1__GENERATE_COMPLETE__HAS_MATCHED_STOP_TOKEN_MATCHED_STOP_TOKEN;
        cp->matched_stop_token = (uint32_t)m->done.matched_stop;
    }
}

static int32_t pack(const ProtobufCMessage *msg, uint8_t **buf, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return -1;
    protobuf_c_message_pack(msg, b);
    *buf = b;
    *len = n;
    return 1;
}

int32_t wk_outbox_pop_packed(struct wk_outbox *o, const char *request_id, uint8_t **buf, size_t *len)
{
    struct wk_outmsg *m = o->head;
    if (!m) return 0;
    Mmgw__Worker__V1__GenerateResponse resp = MMGW__WORKER__V1__GENERATE_RESPONSE__INIT;
    resp.request_id = (char *)request_id;
    int32_t rc;
    Mmgw__Worker__V1__GenerateComplete cp = MMGW__WORKER__V1__GENERATE_COMPLETE__INIT;
    if (m->has_done) complete_fill(&cp, m);
    if (m->is_complete) {
        resp.response_case = MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_COMPLETE;
        resp.complete = &cp;
        rc = pack(&resp.base, buf, len);
    } else {
        Mmgw__Worker__V1__GenerateChunk ch = MMGW__WORKER__V1__GENERATE_CHUNK__INIT;
        ch.index = (uint32_t)m->index;
        ch.n_token_ids = (size_t)m->n;
        ch.token_ids = m->ids;
        if (m->has_lp) {
            ch.n_logprobs = (size_t)m->n;
            ch.logprobs = m->lps;
        }
        Mmgw__Worker__V1__TopLogprobs *tops = NULL, **topp = NULL;
        if (m->top_n) {
            tops = calloc((size_t)m->n, sizeof(*tops));
            topp = calloc((size_t)m->n, sizeof(*topp));
            if (!tops || !topp) {
                free(tops);
                free(topp);
                return -1;
            }
            for (int32_t i = 0; i < m->n; i++) {
                mmgw__worker__v1__top_logprobs__init(&tops[i]);
                tops[i].n_token_ids = (size_t)m->top_n;
                tops[i].token_ids = m->top_ids + (size_t)i * m->top_n;
                tops[i].n_logprobs = (size_t)m->top_n;
                tops[i].logprobs = m->top_lps + (size_t)i * m->top_n;
                topp[i] = &tops[i];
            }
            ch.n_top_logprobs = (size_t)m->n;
            ch.top_logprobs = topp;
        }
        resp.response_case = MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_CHUNK;
        resp.chunk = &ch;
        if (m->has_done) resp.chunk_complete = &cp;
        rc = pack(&resp.base, buf, len);
        free(tops);
        free(topp);
    }
    if (rc < 0) return -1;
    o->head = m->next;
    if (!o->head) o->tail = NULL;
    o->count--;
    msg_free(m);
    return 1;
}
