/* The scheduler thread: inbox and commands, admission by page reservation, preemption, shutdown.
 * The batched step itself lives in wk_sched_step.c. */
#include "wk_sched_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mm_log.h"
#include "mm_clock.h"

#define LOG "sched"

int64_t sched_pages(const struct wk_sched *s, int64_t tokens)
{
    int64_t bs = s->info->block_size;
    return tokens <= 0 ? 0 : (tokens + bs - 1) / bs;
}

static int64_t clamp0(int64_t v)
{
    return v < 0 ? 0 : v;
}

/* Pages request q may still take from the pool before it ends, given the horizons it reserved. Before the
 * prompt is forked, choices 1..n-1 will share the prompt's full pages and copy its partial last one. */
int64_t sched_growth(const struct wk_sched *s, const struct sreq *q)
{
    const int64_t P = q->r->n_ids, shared = P / s->info->block_size;
    int64_t g = 0;
    if (q->state == SREQ_RUNNING) {
        for (int32_t i = 0; i < q->r->sp.n; i++) {
            const struct choice *c = &q->ch[i];
            if (c->finished || !c->seq) continue;
            g += clamp0(sched_pages(s, c->horizon) - sched_pages(s, wk_seq_len(c->seq)));
        }
        return g;
    }
    /* waiting or prefilling: choice 0 carries the prompt even if it already finished (n > 1, preempted) */
    const struct choice *c0 = &q->ch[0];
    int64_t h0 = c0->finished ? P : c0->horizon;
    int64_t len0 = c0->seq ? wk_seq_len(c0->seq) : 0;
    g += clamp0(sched_pages(s, h0) - sched_pages(s, len0));
    for (int32_t i = 1; i < q->r->sp.n; i++)
        if (!q->ch[i].finished) g += clamp0(sched_pages(s, q->ch[i].horizon) - shared);
    return g;
}

int64_t sched_growth_all(const struct wk_sched *s)
{
    int64_t g = 0;
    for (const struct sreq *q = s->running; q; q = q->next) g += sched_growth(s, q);
    return g;
}

static int32_t unfinished(const struct sreq *q)
{
    return q->r->sp.n - q->n_done;
}

static int32_t running_seqs(const struct wk_sched *s)
{
    int32_t n = 0;
    for (const struct sreq *q = s->running; q; q = q->next) n += unfinished(q);
    return n;
}

/* Horizons for a (re)admission: bounded requests reserve their whole budget, the others a step more than
 * what they already generated. */
static void set_horizons(const struct wk_sched *s, struct sreq *q)
{
    const int64_t P = q->r->n_ids, ctx = s->max_context;
    for (int32_t i = 0; i < q->r->sp.n; i++) {
        struct choice *c = &q->ch[i];
        int64_t h = q->bounded ? P + q->r->sp.max_new_tokens : P + c->n_gen + s->o.grow_tokens;
        c->horizon = h < ctx ? h : ctx;
    }
}

static void list_remove(struct sreq **head, struct sreq *q)
{
    for (struct sreq **pp = head; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            q->next = NULL;
            return;
        }
}

static void list_append(struct sreq **head, struct sreq *q)
{
    struct sreq **pp = head;
    while (*pp) pp = &(*pp)->next;
    q->next = NULL;
    *pp = q;
}

static void free_sreq(struct wk_sched *s, struct sreq *q)
{
    if (!q) return;
    for (int32_t i = 0; i < q->r->sp.n; i++) free(q->ch[i].gen);
    if (q->embeds) {
        for (int32_t i = 0; i < q->r->n_media; i++) wk_engine_embeds_free(s->e, &q->embeds[i]);
        free(q->embeds);
    }
    free(q->jobs); /* detached by sched_end: the jobs still out are freed when they come back */
    wk_request_free(q->r);
    free(q);
}

static void release_seqs(struct wk_sched *s, struct sreq *q)
{
    for (int32_t i = 0; i < q->r->sp.n; i++) {
        if (q->ch[i].seq) wk_seq_free(s->e, q->ch[i].seq);
        q->ch[i].seq = NULL;
        q->ch[i].fed = 0;
    }
}

static void publish_load(struct wk_sched *s);

/* End a request the scheduler thread holds (waiting or running): free its pages, tell the sink, forget it. */
void sched_end(struct wk_sched *s, struct sreq *q, int32_t status, const char *msg)
{
    list_remove(&s->waiting, q);
    list_remove(&s->running, q);
    sched_media_detach(q); /* an encode in flight stops at its next layer; its pixels go when it is back */
    release_seqs(s, q);
    if (status != MM_OK) {
        /* choices still open end as "abort", so a consumer always sees one Complete per choice */
        for (int32_t i = 0; i < q->r->sp.n; i++)
            if (!q->ch[i].finished) sched_finish_choice(s, q, i, "abort", 0, 0);
    }
    publish_load(s); /* a Load that follows the stream's end sees the pages back */
    /* the request id is free again before the end goes out: the sink may send the status at once, and a
     * client may reuse the id as soon as it sees it */
    pthread_mutex_lock(&s->mu);
    for (struct sreq **pp = &s->live; *pp; pp = &(*pp)->live_next)
        if (*pp == q) {
            *pp = q->live_next;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    q->sink.end(q->sink.ctx, status, msg ? msg : "");
    if (mm_log_get_level() >= MM_LOG_INFO) {
        int64_t gen = 0, now = mm_now_ms();
        for (int32_t i = 0; i < q->r->sp.n; i++) gen += q->ch[i].n_gen;
        mm_log_info(
            LOG,
            "'%s' %s: prompt %lld (cached %lld), %d choice(s), %lld tokens, first token %lld ms, %lld "
            "ms, vision %lld ms%s%s",
            q->r->id, mm_status_name(status), (long long)q->r->n_ids, (long long)q->cached, q->r->sp.n,
            (long long)gen, (long long)(q->t_first_ms ? q->t_first_ms - q->t_submit_ms : -1),
            (long long)(now - q->t_submit_ms), (long long)(q->encode_us / 1000),
            status != MM_OK && msg ? ": " : "", status != MM_OK && msg ? msg : "");
    }
    pthread_mutex_lock(&s->mu);
    s->n_live--;
    if (s->n_live == 0) pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
    free_sreq(s, q);
}

void sched_preempt(struct wk_sched *s, struct sreq *q)
{
    mm_log_info(LOG, "preempting request '%s' (%d choices open) to free pages; it will be recomputed",
                q->r->id, unfinished(q));
    release_seqs(s, q);
    list_remove(&s->running, q);
    s->preemptions++;
    q->state = SREQ_WAITING;
    q->prompt_fed = 0;
    q->next = s->waiting; /* at the head: it was admitted before anything that waits */
    s->waiting = q;
    pthread_mutex_lock(&s->mu);
    s->n_queued++;
    pthread_mutex_unlock(&s->mu);
}

static int64_t free_pages(const struct wk_sched *s)
{
    return wk_engine_free_pages(s->e);
}

/* Admit waiting requests in order while their reservation fits; no overtaking, so nobody starves. */
static void admit(struct wk_sched *s)
{
    while (s->waiting) {
        struct sreq *q = s->waiting;
        if (running_seqs(s) + unfinished(q) > s->o.max_seqs) return;
        set_horizons(s, q);
        int64_t need = sched_growth(s, q);
        int64_t avail = free_pages(s) - sched_growth_all(s);
        if (need > avail) {
            if (s->running) return;
            /* nothing runs, so nothing will free pages: waiting would be forever */
            char msg[256];
            snprintf(msg, sizeof(msg), "request needs %lld cache pages, only %lld are free", (long long)need,
                     (long long)avail);
            pthread_mutex_lock(&s->mu);
            s->n_queued--;
            pthread_mutex_unlock(&s->mu);
            sched_end(s, q, MM_EXHAUSTED, msg);
            continue;
        }
        struct mm_err err = {0};
        struct choice *c0 = &q->ch[0];
        if (wk_seq_create(s->e, &c0->seq, &err) != MM_OK) {
            mm_log_error(LOG, "request '%s': %s", q->r->id, err.msg);
            pthread_mutex_lock(&s->mu);
            s->n_queued--;
            pthread_mutex_unlock(&s->mu);
            sched_end(s, q, err.code ? err.code : MM_ERROR, err.msg);
            continue;
        }
        int64_t k = wk_seq_reuse_prefix(s->e, c0->seq, q->r->ids, q->r->n_ids, q->r->media_hash);
        if (k < 0 || k >= q->r->n_ids) k = 0; /* defensive: the contract says 0 <= k < n */
        q->prompt_fed = wk_seq_len(c0->seq);
        if (!q->admitted_once) q->cached = k;
        q->admitted_once = 1;
        q->state = SREQ_PREFILL;
        q->admit_seq = s->admit_counter++;
        s->waiting = q->next;
        list_append(&s->running, q);
        pthread_mutex_lock(&s->mu);
        s->n_queued--;
        pthread_mutex_unlock(&s->mu);
        mm_log_debug(LOG, "admitted '%s': %lld prompt tokens (%lld cached), %d choices, reserve %lld pages",
                     q->r->id, (long long)q->r->n_ids, (long long)k, q->r->sp.n, (long long)need);
        /* Pages are reserved before the media is encoded: the reused prefix tells which items need the
         * vision tower at all, embeddings are only ever held for admitted requests (bounded by the pool and
         * --max-seqs, not by the queue), and a request whose embeddings are back can prefill at once. */
        sched_media_start(s, q); /* may end q */
    }
}

static void publish_load(struct wk_sched *s)
{
    struct wk_sched_load l = {0};
    for (const struct sreq *q = s->running; q; q = q->next) l.running_requests++;
    l.running_seqs = running_seqs(s);
    l.free_pages = free_pages(s);
    l.available_pages = clamp0(l.free_pages - sched_growth_all(s));
    l.total_pages = s->info->pages_total;
    l.page_tokens = s->info->block_size;
    l.max_waiting = s->o.max_waiting;
    l.steps = s->steps;
    l.preemptions = s->preemptions;
    for (const struct sreq *q = s->running; q; q = q->next) l.encoding_requests += sched_encoding(q);
    pthread_mutex_lock(&s->mu);
    l.waiting_requests = s->n_queued;
    l.draining = s->draining;
    s->load = l;
    pthread_mutex_unlock(&s->mu);
}

static struct sreq *find_local(struct wk_sched *s, uint64_t ticket, const char *id)
{
    struct sreq *lists[2] = {s->running, s->waiting};
    for (int l = 0; l < 2; l++)
        for (struct sreq *q = lists[l]; q; q = q->next)
            if ((id && strcmp(q->r->id, id) == 0) || (!id && q->ticket == ticket)) return q;
    return NULL;
}

static void run_commands(struct wk_sched *s, struct cmd *c)
{
    while (c) {
        struct cmd *next = c->next;
        struct sreq *q = find_local(s, c->ticket, c->kind == CMD_ABORT ? c->id : NULL);
        if (q) {
            if (q->state == SREQ_WAITING) {
                pthread_mutex_lock(&s->mu);
                s->n_queued--;
                pthread_mutex_unlock(&s->mu);
            }
            sched_end(s, q, MM_CANCELLED, c->kind == CMD_ABORT ? "aborted" : "cancelled by the client");
        }
        if (c->done) {
            publish_load(s); /* so that a Load right after the Abort reply sees the freed pages */
            c->done(c->arg, q != NULL);
        }
        free(c->id);
        free(c);
        c = next;
    }
}

/* Unbounded requests reserve grow_tokens at a time; extend before a choice passes its horizon, preempting
 * the youngest unbounded request when the pool cannot cover the extension. */
static void extend_horizons(struct wk_sched *s)
{
    const int64_t ctx = s->max_context;
    struct sreq *q = s->running;
    while (q) {
        struct sreq *next = q->next;
        int32_t preempted = 0;
        for (int32_t i = 0; q->state == SREQ_RUNNING && !q->bounded && i < q->r->sp.n && !preempted; i++) {
            struct choice *c = &q->ch[i];
            if (c->finished || !c->seq) continue;
            int64_t len = wk_seq_len(c->seq);
            if (len + 1 <= c->horizon) continue;
            int64_t nh = len + 1 + s->o.grow_tokens;
            if (nh > ctx) nh = ctx;
            int64_t extra = sched_pages(s, nh) - sched_pages(s, c->horizon);
            while (extra > free_pages(s) - sched_growth_all(s)) {
                struct sreq *victim = NULL;
                for (struct sreq *v = s->running; v; v = v->next)
                    if (!v->bounded && (!victim || v->admit_seq > victim->admit_seq)) victim = v;
                if (victim == q && s->running == q && !q->next) {
                    /* alone and still short: the pool cannot hold this choice any longer */
                    sched_finish_choice(s, q, i, "length", 0, 0);
                    break;
                }
                if (victim == next) next = next->next;
                sched_preempt(s, victim);
                if (victim == q) {
                    preempted = 1;
                    break;
                }
            }
            if (!preempted && !c->finished) c->horizon = nh;
        }
        if (!preempted && q->state == SREQ_RUNNING && q->n_done == q->r->sp.n) sched_end(s, q, MM_OK, NULL);
        q = next;
    }
}

static void end_all(struct wk_sched *s, int32_t status, const char *msg)
{
    pthread_mutex_lock(&s->mu);
    struct sreq *in = s->inbox;
    s->inbox = NULL;
    s->inbox_tail = &s->inbox;
    pthread_mutex_unlock(&s->mu);
    while (in) {
        struct sreq *n = in->next;
        list_append(&s->waiting, in);
        in = n;
    }
    while (s->running) sched_end(s, s->running, status, msg);
    while (s->waiting) sched_end(s, s->waiting, status, msg);
    pthread_mutex_lock(&s->mu);
    s->n_queued = 0;
    pthread_mutex_unlock(&s->mu);
}

/* The step's events leave now (sinks that hold them; ended requests were flushed by their end call). */
static void flush_events(struct wk_sched *s)
{
    struct sreq *lists[2] = {s->running, s->waiting};
    for (int32_t l = 0; l < 2; l++)
        for (struct sreq *q = lists[l]; q; q = q->next)
            if (q->dirty) {
                q->dirty = 0;
                if (q->sink.flush) q->sink.flush(q->sink.ctx);
            }
}

/* Whether a loop iteration can do anything without news from outside (a submit, a command, an encoder
 * job): a request that can step, or a queue head that admission must decide on while nothing runs. Requests
 * that wait for the encoder, and a queue head that waits for pages, wait for news. */
static int32_t has_work(const struct wk_sched *s)
{
    if (s->waiting && !s->running) return 1;
    for (const struct sreq *q = s->running; q; q = q->next)
        if (!sched_waits_for_encoder(q)) return 1;
    return 0;
}

/* The scheduler thread stops: the encoder hands back every job (cancelled: their requests have ended), then
 * they are freed with their pixels. */
static void stop_encoder(struct wk_sched *s)
{
    if (!s->enc) return;
    wk_encoder_stop(s->enc);
    sched_media_collect(s);
}

static void *sched_main(void *arg)
{
    struct wk_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stop && !s->inbox && !s->cmds && !s->enc_done && !has_work(s)) {
            if (s->draining && s->drain_deadline_ms >= 0 && s->n_live > 0) {
                int64_t left = s->drain_deadline_ms - mm_now_ms();
                if (left <= 0) break;
                struct timespec ts = mm_realtime_after_ms(left);
                pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            } else {
                pthread_cond_wait(&s->cv, &s->mu);
            }
        }
        int32_t stop = s->stop;
        int32_t drain_over = s->draining && s->drain_deadline_ms >= 0 && mm_now_ms() >= s->drain_deadline_ms;
        struct sreq *in = s->inbox;
        s->inbox = NULL;
        s->inbox_tail = &s->inbox;
        struct cmd *cmds = s->cmds;
        s->cmds = NULL;
        s->cmds_tail = &s->cmds;
        pthread_mutex_unlock(&s->mu);

        while (in) {
            struct sreq *n = in->next;
            list_append(&s->waiting, in);
            in = n;
        }
        run_commands(s, cmds);
        sched_media_collect(s);
        if (stop) {
            end_all(s, MM_UNAVAILABLE, "worker stopped");
            stop_encoder(s);
            publish_load(s);
            break;
        }
        if (drain_over) {
            if (s->running || s->waiting)
                mm_log_warn(LOG, "drain timeout: aborting the requests still running");
            end_all(s, MM_UNAVAILABLE, "worker shutting down");
        }
        extend_horizons(s);
        admit(s);
        sched_step(s);
        flush_events(s);
        publish_load(s);
    }
    return NULL;
}

int32_t wk_sched_create(struct wk_engine *e, const struct wk_sched_opts *opts, struct wk_sched **out,
                        struct mm_err *err)
{
    *out = NULL;
    struct wk_sched *s = calloc(1, sizeof(*s));
    if (!s) return mm_err_set(err, MM_NOMEM, "out of memory");
    s->e = e;
    s->info = wk_engine_info(e);
    s->o = *opts;
    /* A sequence longer than the pool can never be held: the context a request may fill is the smaller of
     * the two (and so is what the worker advertises, wk_sched_max_context). */
    s->max_context = s->info->max_context;
    if (s->info->pages_total * (int64_t)s->info->block_size < s->max_context)
        s->max_context = s->info->pages_total * (int64_t)s->info->block_size;
    if (s->o.max_waiting <= 0) s->o.max_waiting = 256;
    if (s->o.max_seqs <= 0) s->o.max_seqs = 256;
    if (s->o.step_tokens <= 0) s->o.step_tokens = 2048;
    if (s->o.grow_tokens <= 0) s->o.grow_tokens = 256;
    if (s->o.max_seqs > s->o.step_tokens) s->o.max_seqs = s->o.step_tokens; /* every decoder gets its token */
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    s->inbox_tail = &s->inbox;
    s->cmds_tail = &s->cmds;
    s->enc_done_tail = &s->enc_done;
    s->next_ticket = 1;
    s->drain_deadline_ms = -1;
    s->seed_counter = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull;
    s->scratch = malloc((size_t)s->info->vocab_size * sizeof(float));
    if (!s->scratch) {
        free(s);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    publish_load(s);
    *out = s;
    return MM_OK;
}

int64_t wk_sched_max_context(const struct wk_sched *s)
{
    return s->max_context;
}

int32_t wk_sched_start(struct wk_sched *s, struct mm_err *err)
{
    /* media goes to its own thread when the engine can encode beside forward() */
    if (s->info->concurrent_encode && wk_encoder_start(s->e, sched_media_done, s, &s->enc, err) != MM_OK)
        return err->code;
    int rc = pthread_create(&s->th, NULL, sched_main, s);
    if (rc) {
        wk_encoder_destroy(s->enc);
        s->enc = NULL;
        return mm_err_set(err, MM_ERROR, "cannot start the scheduler thread: %s", strerror(rc));
    }
    s->started = 1;
    return MM_OK;
}

void wk_sched_stop(struct wk_sched *s)
{
    pthread_mutex_lock(&s->mu);
    int32_t was = s->stop;
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (was) return;
    if (s->started) {
        pthread_join(s->th, NULL);
    } else {
        run_commands(s, s->cmds);
        s->cmds = NULL;
        end_all(s, MM_UNAVAILABLE, "worker stopped");
    }
}

void wk_sched_destroy(struct wk_sched *s)
{
    if (!s) return;
    wk_sched_stop(s);
    wk_encoder_destroy(s->enc); /* stopped by the scheduler thread; every job came back and was freed */
    for (struct wk_enc_job *j = s->enc_done; j;) {
        struct wk_enc_job *next = j->next;
        sched_media_free_job(s, j);
        j = next;
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    free(s->logits);
    free(s->items);
    free(s->item_req);
    free(s->item_choice);
    free(s->item_cands);
    free(s->cand_ids);
    free(s->cand_logits);
    free(s->scratch);
    free(s);
}

int32_t wk_sched_submit(struct wk_sched *s, struct wk_request *r, const struct wk_sched_sink *sink,
                        uint64_t *ticket, struct mm_err *err)
{
    const int32_t n = r->sp.n;
    struct sreq *q = calloc(1, sizeof(*q) + (size_t)n * sizeof(struct choice));
    if (!q) return mm_err_set(err, MM_NOMEM, "out of memory");
    q->r = r;
    q->sink = *sink;
    q->t_submit_ms = mm_now_ms();
    q->bounded = r->sp.has_max_new_tokens;
    if (r->n_media) {
        q->embeds = calloc((size_t)r->n_media, sizeof(struct wk_embeds));
        q->jobs = calloc((size_t)r->n_media, sizeof(struct wk_enc_job *));
        if (!q->embeds || !q->jobs) {
            free(q->embeds);
            free(q->jobs);
            free(q);
            return mm_err_set(err, MM_NOMEM, "out of memory");
        }
    }
    for (int32_t i = 0; i < n; i++) {
        uint64_t seed = r->sp.has_seed
                            ? r->sp.seed
                            : __atomic_add_fetch(&s->seed_counter, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED);
        q->ch[i].rng = seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(i + 1));
    }
    set_horizons(s, q);
    /* A request whose reservation exceeds the whole pool can never be admitted (not even alone, with every
     * page free): that is the request's fault, not a busy worker's, so MM_INVALID (a 400 at the gateway)
     * rather than MM_EXHAUSTED (a 429 that invites retries that cannot succeed). */
    int64_t alone = sched_growth(s, q), reserved = q->ch[0].horizon - r->n_ids;
    if (alone > s->info->pages_total) {
        free(q->embeds);
        free(q->jobs);
        free(q);
        return mm_err_set(err, MM_INVALID,
                          "request needs %lld cache pages at once (%lld prompt tokens, %lld new reserved per "
                          "choice, %d choices), the cache holds %lld pages (%lld tokens); lower n or "
                          "max_new_tokens",
                          (long long)alone, (long long)r->n_ids, (long long)reserved, n,
                          (long long)s->info->pages_total,
                          (long long)(s->info->pages_total * s->info->block_size));
    }
    if (n > s->o.max_seqs) {
        free(q->embeds);
        free(q->jobs);
        free(q);
        return mm_err_set(err, MM_EXHAUSTED, "n = %d is more than the %d sequences the worker runs at once",
                          n, s->o.max_seqs);
    }
    int32_t rc = MM_OK;
    pthread_mutex_lock(&s->mu);
    if (s->draining || s->stop) {
        rc = mm_err_set(err, MM_UNAVAILABLE, "the worker is shutting down");
    } else if (s->n_queued >= s->o.max_waiting) {
        rc = mm_err_set(err, MM_EXHAUSTED, "%d requests are already waiting (--max-queue)", s->n_queued);
    } else {
        for (struct sreq *l = s->live; l; l = l->live_next)
            if (strcmp(l->r->id, r->id) == 0) {
                rc = mm_err_set(err, MM_INVALID, "request_id '%s' is already in use", r->id);
                break;
            }
    }
    if (rc == MM_OK) {
        q->ticket = s->next_ticket++;
        q->live_next = s->live;
        s->live = q;
        s->n_live++;
        s->n_queued++;
        *s->inbox_tail = q;
        s->inbox_tail = &q->next;
        if (ticket) *ticket = q->ticket;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != MM_OK) {
        free(q->embeds);
        free(q->jobs);
        free(q);
    }
    return rc;
}

static void post_cmd(struct wk_sched *s, struct cmd *c)
{
    pthread_mutex_lock(&s->mu);
    int32_t alive = s->started && !s->stop;
    if (alive) {
        *s->cmds_tail = c;
        s->cmds_tail = &c->next;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (!alive) {
        if (c->done) c->done(c->arg, 0);
        free(c->id);
        free(c);
    }
}

void wk_sched_cancel(struct wk_sched *s, uint64_t ticket)
{
    struct cmd *c = calloc(1, sizeof(*c));
    if (!c) return; /* the request then runs to its end: wasteful, not wrong */
    c->kind = CMD_CANCEL;
    c->ticket = ticket;
    post_cmd(s, c);
}

void wk_sched_abort(struct wk_sched *s, const char *request_id, void (*done)(void *arg, int32_t found),
                    void *arg)
{
    struct cmd *c = calloc(1, sizeof(*c));
    char *id = c ? strdup(request_id ? request_id : "") : NULL;
    if (!id) {
        free(c);
        if (done) done(arg, 0);
        return;
    }
    c->kind = CMD_ABORT;
    c->id = id;
    c->done = done;
    c->arg = arg;
    post_cmd(s, c);
}

void wk_sched_load(struct wk_sched *s, struct wk_sched_load *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->load;
    out->waiting_requests = s->n_queued;
    out->draining = s->draining;
    pthread_mutex_unlock(&s->mu);
}

void wk_sched_drain(struct wk_sched *s, int64_t timeout_ms)
{
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    s->drain_deadline_ms = timeout_ms < 0 ? -1 : mm_now_ms() + timeout_ms;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int32_t wk_sched_wait_idle(struct wk_sched *s, int64_t timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : mm_now_ms() + timeout_ms;
    int32_t rc = MM_OK;
    pthread_mutex_lock(&s->mu);
    while (s->n_live > 0) {
        if (deadline < 0) {
            pthread_cond_wait(&s->idle_cv, &s->mu);
            continue;
        }
        int64_t left = deadline - mm_now_ms();
        if (left <= 0) {
            rc = MM_TIMEOUT;
            break;
        }
        struct timespec ts = mm_realtime_after_ms(left);
        pthread_cond_timedwait(&s->idle_cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}
