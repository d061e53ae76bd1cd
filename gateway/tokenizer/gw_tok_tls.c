/* Per-thread scratch for encoding: PCRE2 match data and JIT stack (a pcre2_code is shareable, its match
 * data is not), the pre-token cache and BPE buffers. One pthread key per tokenizer finds this thread's
 * scratch; every scratch is also linked into its tokenizer so gw_tokenizer_free can release the
 * scratch of threads that are still alive, and the key's destructor releases it when a thread exits. */
#include <stdlib.h>
#include <string.h>

#include "gw_tok_internal.h"

#define JIT_STACK_MIN (32u << 10)
#define JIT_STACK_MAX (1u << 20)
#define TRIM_BYTES (1u << 20) /* scratch kept between calls, per buffer */

static void tls_destroy(struct gw_tok_tls *t)
{
    if (!t) return;
    pcre2_match_data_free(t->md);
    pcre2_match_context_free(t->mctx);
    pcre2_jit_stack_free(t->jit_stack);
    gw_tok_cache_free(&t->cache);
    for (int i = 0; i < GW_TOK_MAX_STAGES; i++) free(t->splits[i].v);
    free(t->prefix_buf);
    free(t->sym);
    free(t->heap);
    free(t);
}

static void unlink_locked(struct gw_tokenizer *tok, struct gw_tok_tls *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        tok->tls_all = t->next;
    if (t->next) t->next->prev = t->prev;
}

/* Thread exit: the tokenizer is still alive (its free deletes the key first). */
static void tls_key_destructor(void *p)
{
    struct gw_tok_tls *t = p;
    struct gw_tokenizer *tok = t->tok;
    pthread_mutex_lock(&tok->tls_lock);
    unlink_locked(tok, t);
    pthread_mutex_unlock(&tok->tls_lock);
    tls_destroy(t);
}

int gw_tok_tls_init_key(struct gw_tokenizer *tok)
{
    if (pthread_mutex_init(&tok->tls_lock, NULL)) return -1;
    if (pthread_key_create(&tok->tls_key, tls_key_destructor)) {
        pthread_mutex_destroy(&tok->tls_lock);
        return -1;
    }
    tok->tls_key_ok = 1;
    return 0;
}

void gw_tok_tls_free_all(struct gw_tokenizer *tok)
{
    if (!tok->tls_key_ok) return;
    pthread_key_delete(tok->tls_key);
    pthread_mutex_lock(&tok->tls_lock);
    struct gw_tok_tls *t = tok->tls_all;
    tok->tls_all = NULL;
    pthread_mutex_unlock(&tok->tls_lock);
    while (t) {
        struct gw_tok_tls *n = t->next;
        tls_destroy(t);
        t = n;
    }
    pthread_mutex_destroy(&tok->tls_lock);
    tok->tls_key_ok = 0;
}

struct gw_tok_tls *gw_tok_tls_get(const struct gw_tokenizer *ctok)
{
    struct gw_tokenizer *tok = (struct gw_tokenizer *)ctok; /* only the registry is touched, under its lock */
    struct gw_tok_tls *t = pthread_getspecific(tok->tls_key);
    if (t) return t;
    t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->tok = tok;
    t->md = pcre2_match_data_create(1, NULL);
    t->mctx = pcre2_match_context_create(NULL);
    t->jit_stack = pcre2_jit_stack_create(JIT_STACK_MIN, JIT_STACK_MAX, NULL);
    if (!t->md || !t->mctx || !t->jit_stack || gw_tok_cache_init(&t->cache)) {
        tls_destroy(t);
        return NULL;
    }
    pcre2_jit_stack_assign(t->mctx, NULL, t->jit_stack);
    pthread_mutex_lock(&tok->tls_lock);
    t->next = tok->tls_all;
    if (t->next) t->next->prev = t;
    tok->tls_all = t;
    pthread_mutex_unlock(&tok->tls_lock);
    if (pthread_setspecific(tok->tls_key, t)) {
        pthread_mutex_lock(&tok->tls_lock);
        unlink_locked(tok, t);
        pthread_mutex_unlock(&tok->tls_lock);
        tls_destroy(t);
        return NULL;
    }
    return t;
}

void gw_tok_tls_trim(struct gw_tok_tls *t)
{
    /* One huge request must not pin its scratch to the thread forever: BPE of an L-byte pre-token
     * needs ~45 L bytes of heap scratch. Keep what everyday text needs, free the rest. */
    if (t->heap_cap > TRIM_BYTES) {
        free(t->heap);
        t->heap = NULL;
        t->heap_cap = 0;
    }
    if (t->sym_cap * sizeof *t->sym > TRIM_BYTES) {
        free(t->sym);
        t->sym = NULL;
        t->sym_cap = 0;
    }
    if (t->prefix_cap > TRIM_BYTES) {
        free(t->prefix_buf);
        t->prefix_buf = NULL;
        t->prefix_cap = 0;
    }
    for (int i = 0; i < GW_TOK_MAX_STAGES; i++)
        if (t->splits[i].cap * sizeof *t->splits[i].v > TRIM_BYTES) {
            free(t->splits[i].v);
            t->splits[i].v = NULL;
            t->splits[i].n = t->splits[i].cap = 0;
        }
}

int gw_tok_splitvec_push(struct gw_tok_splitvec *v, size_t start, size_t end, int is_match)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        struct gw_tok_split *nv = realloc(v->v, cap * sizeof *nv);
        if (!nv) return -1;
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = (struct gw_tok_split){start, end, is_match};
    return 0;
}
