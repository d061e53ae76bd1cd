/* mmgw-run --model DIR --eval IN.safetensors --out OUT.safetensors [--backend cpu|cuda] [--threads N]
 *          [--chunk N] [--sequential] [--cache-pages N]
 *
 * For every case <c> of IN (a tensor <c>/ids, I32 [L]; optional <c>/pixel_values + <c>/image_grid_thw,
 * <c>/pixel_values_videos + <c>/video_grid_thw; optional <c>/greedy whose length says how many tokens to
 * generate, default 8) it writes <c>/logits_last8 (F32 [8, vocab]: the last 8 prompt positions),
 * <c>/argmax (I32 [L]), <c>/greedy (I32 [n]) and <c>/sel_layer<K> (I32 [kv_groups, L, k], the first MSA
 * layer K's selected blocks, k = min(topk_blocks, blocks in the prompt), -1 = empty).
 *
 * All cases run together, one batch per step (prompts in chunks of --chunk tokens, then greedy decode),
 * unless --sequential runs them one after another: both must give the same tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mm_clock.h"
#include "mm_dtype.h"
#include "mm_log.h"
#include "mm_safetensors.h"
#include "mm_text.h"
#include "wk_engine.h"

struct evcase {
    char name[256];
    int32_t *ids;
    int64_t L;
    int32_t n_gen;
    float *embeds; /* [L][hidden] media rows, NULL for text */
    uint8_t *use_embed;
    /* progress */
    struct wk_seq *seq;
    int64_t done;  /* prompt tokens fed */
    int32_t n_out; /* generated tokens */
    /* results */
    int32_t *argmax, *greedy, *sel;
    float *last8;
    int32_t k_sel;
    /* per step */
    float *logits;
    int32_t *step_sel;
};

static void usage(void)
{
    fprintf(stderr,
            "usage: mmgw-run --model DIR --eval IN.safetensors --out OUT.safetensors [--backend cpu|cuda] "
            "[--threads N] [--chunk N] [--sequential] [--cache-pages N]\n");
}

static int32_t argmax_row(const float *l, int32_t v)
{
    int32_t b = 0;
    for (int32_t i = 1; i < v; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* Read an integer tensor as int64 values. */
static int32_t read_ints(const struct mm_st_tensor *t, int64_t *dst, struct mm_err *err)
{
    for (uint64_t i = 0; i < t->numel; i++) {
        if (t->dtype == MM_DT_I64) {
            memcpy(&dst[i], (const char *)t->data + 8 * i, 8);
        } else if (t->dtype == MM_DT_I32) {
            int32_t v;
            memcpy(&v, (const char *)t->data + 4 * i, 4);
            dst[i] = v;
        } else {
            return mm_err_set(err, MM_FORMAT, "tensor '%s': expected I32 or I64, got %s", t->name,
                              mm_dtype_name(t->dtype));
        }
    }
    return MM_OK;
}

/* Encode the media of one kind and place the embeddings at that kind's placeholder tokens, in order. */
static int32_t place_media(struct wk_engine *e, const struct mm_st_file *in, struct evcase *c,
                           const char *pv_key, const char *grid_key, int32_t kind, int32_t token,
                           struct mm_err *err)
{
    char name[512];
    snprintf(name, sizeof name, "%s/%s", c->name, pv_key);
    const struct mm_st_tensor *pv = mm_st_find(in, name);
    snprintf(name, sizeof name, "%s/%s", c->name, grid_key);
    const struct mm_st_tensor *gr = mm_st_find(in, name);
    if (!pv && !gr) return MM_OK;
    if (!pv || !gr)
        return mm_err_set(err, MM_FORMAT, "case %s: %s and %s go together", c->name, pv_key, grid_key);
    if (pv->ndim != 2 || gr->ndim != 2 || gr->shape[1] != 3)
        return mm_err_set(err, MM_FORMAT, "case %s: %s must be [N, row] and %s [n, 3]", c->name, pv_key,
                          grid_key);
    if (pv->dtype != MM_DT_F32 && pv->dtype != MM_DT_BF16 && pv->dtype != MM_DT_F16)
        return mm_err_set(err, MM_FORMAT, "case %s: %s has dtype %s", c->name, pv_key,
                          mm_dtype_name(pv->dtype));
    const struct wk_model_info *mi = wk_engine_info(e);
    int64_t n_items = gr->shape[0];
    int64_t *grid = malloc(sizeof(int64_t) * (size_t)(n_items * 3 + 1));
    if (!grid) return mm_err_set(err, MM_NOMEM, "out of memory");
    int32_t rc = read_ints(gr, grid, err);
    int64_t row = 0, tok = 0;
    /* the placeholder positions of this kind, in order */
    for (int64_t it = 0; !rc && it < n_items; it++) {
        int64_t t = grid[it * 3], h = grid[it * 3 + 1], w = grid[it * 3 + 2];
        int64_t left = pv->shape[0] - row;
        /* checked by division so that absurd grids cannot overflow the product */
        if (t <= 0 || h <= 0 || w <= 0 || t > left || h > left / t || w > left / (t * h)) {
            rc = mm_err_set(err, MM_FORMAT,
                            "case %s: %s item %lld: grid (%lld, %lld, %lld) does not fit %lld rows", c->name,
                            grid_key, (long long)it, (long long)t, (long long)h, (long long)w,
                            (long long)pv->shape[0]);
            break;
        }
        size_t esz = mm_dtype_size(pv->dtype);
        struct wk_media m = {kind,
                             pv->dtype,
                             (const char *)pv->data + (size_t)(row * pv->shape[1]) * esz,
                             t * h * w,
                             pv->shape[1],
                             t,
                             h,
                             w};
        float *emb = NULL;
        int64_t n_tok = 0;
        if ((rc = wk_engine_encode_media(e, &m, &emb, &n_tok, err))) {
            mm_err_prefix(err, "case %s: %s item %lld", c->name, pv_key, (long long)it);
            break;
        }
        for (int64_t j = 0; j < n_tok; j++) {
            while (tok < c->L && c->ids[tok] != token) tok++;
            if (tok == c->L) {
                rc = mm_err_set(err, MM_FORMAT, "case %s: fewer placeholder tokens (%d) than %s embeddings",
                                c->name, token, pv_key);
                break;
            }
            memcpy(c->embeds + tok * mi->hidden_size, emb + j * mi->hidden_size,
                   sizeof(float) * (size_t)mi->hidden_size);
            c->use_embed[tok++] = 1;
        }
        free(emb);
        row += t * h * w;
    }
    if (!rc) {
        while (tok < c->L && c->ids[tok] != token) tok++;
        if (tok < c->L)
            rc = mm_err_set(err, MM_FORMAT, "case %s: more placeholder tokens (%d) than %s embeddings",
                            c->name, token, pv_key);
    }
    free(grid);
    return rc;
}

static int32_t load_case(struct wk_engine *e, const struct mm_st_file *in, const char *name, struct evcase *c,
                         int64_t chunk, struct mm_err *err)
{
    const struct wk_model_info *mi = wk_engine_info(e);
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    char key[512];
    snprintf(key, sizeof key, "%s/ids", name);
    const struct mm_st_tensor *t = mm_st_find(in, key);
    if (!t || t->ndim != 1 || t->shape[0] < 1)
        return mm_err_set(err, MM_FORMAT, "case %s: ids must be a non-empty 1-D tensor", name);
    c->L = t->shape[0];
    int64_t *tmp = malloc(sizeof(int64_t) * (size_t)c->L);
    c->ids = malloc(sizeof(int32_t) * (size_t)c->L);
    if (!tmp || !c->ids) {
        free(tmp);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    int32_t rc = read_ints(t, tmp, err);
    for (int64_t i = 0; !rc && i < c->L; i++) {
        if (tmp[i] < 0 || tmp[i] >= mi->vocab_size)
            rc = mm_err_set(err, MM_FORMAT, "case %s: token %lld at %lld is outside the vocabulary", name,
                            (long long)tmp[i], (long long)i);
        c->ids[i] = (int32_t)tmp[i];
    }
    free(tmp);
    if (rc) return rc;
    c->n_gen = 8;
    snprintf(key, sizeof key, "%s/greedy", name);
    const struct mm_st_tensor *g = mm_st_find(in, key);
    if (g) c->n_gen = (int32_t)(g->ndim == 1 ? g->shape[0] : (int64_t)g->numel);
    if (c->n_gen < 0 || c->n_gen > 1 << 20) return mm_err_set(err, MM_FORMAT, "case %s: greedy length", name);

    int64_t H = mi->hidden_size, V = mi->vocab_size;
    snprintf(key, sizeof key, "%s/pixel_values", name);
    int has_img = mm_st_find(in, key) != NULL;
    snprintf(key, sizeof key, "%s/pixel_values_videos", name);
    int has_vid = mm_st_find(in, key) != NULL;
    if (has_img || has_vid) {
        c->embeds = calloc((size_t)(c->L * H), sizeof(float));
        c->use_embed = calloc((size_t)c->L, 1);
        if (!c->embeds || !c->use_embed) return mm_err_set(err, MM_NOMEM, "out of memory");
        if ((rc = place_media(e, in, c, "pixel_values", "image_grid_thw", 0, mi->image_token_id, err)) ||
            (rc = place_media(e, in, c, "pixel_values_videos", "video_grid_thw", 1, mi->video_token_id, err)))
            return rc;
    }
    int64_t blocks = (c->L + mi->block_size - 1) / mi->block_size;
    c->k_sel = (int32_t)(mi->topk_blocks < blocks ? mi->topk_blocks : blocks);
    int32_t n_idx = mi->n_index_heads;
    c->argmax = malloc(sizeof(int32_t) * (size_t)c->L);
    c->greedy = malloc(sizeof(int32_t) * (size_t)(c->n_gen ? c->n_gen : 1));
    c->last8 = calloc((size_t)(8 * V), sizeof(float));
    c->logits = malloc(sizeof(float) * (size_t)(chunk * V));
    if (mi->first_msa_layer >= 0) {
        c->sel = malloc(sizeof(int32_t) * (size_t)(n_idx * c->L * (c->k_sel ? c->k_sel : 1)));
        c->step_sel = malloc(sizeof(int32_t) * (size_t)(n_idx * chunk * mi->topk_blocks));
        if (!c->sel || !c->step_sel) return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    if (!c->argmax || !c->greedy || !c->last8 || !c->logits)
        return mm_err_set(err, MM_NOMEM, "out of memory");
    return wk_seq_create(e, &c->seq, err);
}

static void free_case(struct wk_engine *e, struct evcase *c)
{
    if (c->seq) wk_seq_free(e, c->seq);
    free(c->ids);
    free(c->embeds);
    free(c->use_embed);
    free(c->argmax);
    free(c->greedy);
    free(c->sel);
    free(c->last8);
    free(c->logits);
    free(c->step_sel);
}

/* Fill one step item for case c (a prompt chunk or one generated token); 0 when the case is finished. */
static int make_item(const struct wk_model_info *mi, struct evcase *c, int64_t chunk, struct wk_step_item *it)
{
    memset(it, 0, sizeof *it);
    it->seq = c->seq;
    if (c->done < c->L) {
        int64_t n = c->L - c->done < chunk ? c->L - c->done : chunk;
        it->ids = c->ids + c->done;
        it->n = (int32_t)n;
        it->logits_mode = WK_LOGITS_ALL;
        it->logits = c->logits;
        if (c->embeds) {
            it->embeds = c->embeds + c->done * mi->hidden_size;
            it->use_embed = c->use_embed + c->done;
        }
        if (c->sel) {
            it->sel = c->step_sel;
            it->sel_k = mi->topk_blocks;
        }
        return 1;
    }
    if (c->n_out >= c->n_gen || c->n_out == 0) return 0; /* the first token comes from the prompt's logits */
    it->ids = &c->greedy[c->n_out - 1];
    it->n = 1;
    it->logits_mode = WK_LOGITS_LAST;
    it->logits = c->logits;
    return 1;
}

static void absorb(const struct wk_model_info *mi, struct evcase *c, const struct wk_step_item *it)
{
    int64_t V = mi->vocab_size;
    if (c->done < c->L) {
        for (int32_t i = 0; i < it->n; i++) {
            int64_t p = c->done + i;
            const float *row = c->logits + (int64_t)i * V;
            c->argmax[p] = argmax_row(row, (int32_t)V);
            int64_t first8 = c->L > 8 ? c->L - 8 : 0;
            if (p >= first8) memcpy(c->last8 + (p - first8) * V, row, sizeof(float) * (size_t)V);
        }
        if (c->sel)
            for (int32_t g = 0; g < mi->n_index_heads; g++)
                for (int32_t i = 0; i < it->n; i++)
                    memcpy(c->sel + ((int64_t)g * c->L + c->done + i) * c->k_sel,
                           c->step_sel + ((int64_t)g * it->n + i) * mi->topk_blocks,
                           sizeof(int32_t) * (size_t)c->k_sel);
        c->done += it->n;
        if (c->done == c->L && c->n_gen > 0) c->greedy[c->n_out++] = c->argmax[c->L - 1];
        return;
    }
    c->greedy[c->n_out++] = argmax_row(c->logits, (int32_t)V);
}

/* Run cases [0, n) to completion, all in one batch per step. */
static int32_t run_cases(struct wk_engine *e, struct evcase *cs, int32_t n, int64_t chunk, struct mm_err *err)
{
    const struct wk_model_info *mi = wk_engine_info(e);
    struct wk_step_item *items = calloc((size_t)n, sizeof *items);
    int32_t *which = calloc((size_t)n, sizeof *which);
    if (!items || !which) {
        free(items);
        free(which);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    int32_t rc = MM_OK;
    for (;;) {
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (make_item(mi, &cs[i], chunk, &items[k])) which[k++] = i;
        if (!k) break;
        if ((rc = wk_engine_forward(e, items, k, err))) break;
        for (int32_t j = 0; j < k; j++) absorb(mi, &cs[which[j]], &items[j]);
    }
    free(items);
    free(which);
    return rc;
}

static int32_t write_out(const struct wk_model_info *mi, struct evcase *cs, int32_t n, const char *path,
                         struct mm_err *err)
{
    struct mm_st_writer *w = mm_st_writer_create();
    if (!w) return mm_err_set(err, MM_NOMEM, "out of memory");
    int32_t rc = MM_OK;
    int64_t V = mi->vocab_size;
    for (int32_t i = 0; i < n && !rc; i++) {
        struct evcase *c = &cs[i];
        char key[512];
        int64_t r8 = c->L < 8 ? c->L : 8;
        snprintf(key, sizeof key, "%s/logits_last8", c->name);
        if ((rc = mm_st_writer_add(w, key, MM_DT_F32, 2, (int64_t[]){r8, V}, c->last8,
                                   sizeof(float) * (size_t)(r8 * V), err)))
            break;
        snprintf(key, sizeof key, "%s/argmax", c->name);
        if ((rc = mm_st_writer_add(w, key, MM_DT_I32, 1, (int64_t[]){c->L}, c->argmax,
                                   sizeof(int32_t) * (size_t)c->L, err)))
            break;
        snprintf(key, sizeof key, "%s/greedy", c->name);
        if ((rc = mm_st_writer_add(w, key, MM_DT_I32, 1, (int64_t[]){c->n_gen}, c->greedy,
                                   sizeof(int32_t) * (size_t)c->n_gen, err)))
            break;
        if (c->sel) {
            snprintf(key, sizeof key, "%s/sel_layer%d", c->name, mi->first_msa_layer);
            int64_t shape[3] = {mi->n_index_heads, c->L, c->k_sel};
            rc = mm_st_writer_add(w, key, MM_DT_I32, 3, shape, c->sel,
                                  sizeof(int32_t) * (size_t)(shape[0] * shape[1] * shape[2]), err);
        }
    }
    if (!rc) rc = mm_st_writer_save(w, path, err);
    mm_st_writer_destroy(w);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *eval = NULL, *outp = NULL, *backend = "cpu";
    int64_t threads = 0, chunk = 0, pages = 0;
    int sequential = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--sequential")) {
            sequential = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (!v) {
            fprintf(stderr, "mmgw-run: %s needs a value\n", a);
            usage();
            return 2;
        }
        i++;
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--eval"))
            eval = v;
        else if (!strcmp(a, "--out"))
            outp = v;
        else if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--threads") && !mm_parse_i64(v, 0, 1024, &threads))
            continue;
        else if (!strcmp(a, "--chunk") && !mm_parse_i64(v, 1, 1 << 20, &chunk))
            continue;
        else if (!strcmp(a, "--cache-pages") && !mm_parse_i64(v, 1, 1LL << 31, &pages))
            continue;
        else {
            fprintf(stderr, "mmgw-run: bad option or value: %s %s\n", a, v);
            usage();
            return 2;
        }
    }
    if (!model || !eval || !outp) {
        usage();
        return 2;
    }
    struct wk_engine_opts o = {0};
    if (!strcmp(backend, "cpu"))
        o.backend = WK_BACKEND_CPU;
    else if (!strcmp(backend, "cuda"))
        o.backend = WK_BACKEND_CUDA;
    else {
        fprintf(stderr, "mmgw-run: unknown backend '%s'\n", backend);
        return 2;
    }
    o.threads = (int32_t)threads;
    o.cache_pages = pages;
    struct mm_err err = {0};
    struct wk_engine *e = NULL;
    struct mm_st_file *in = NULL;
    struct evcase *cs = NULL;
    const char **names = NULL;
    int32_t n = 0, rc;
    double t0 = (double)mm_now_ns() * 1e-9;
    if ((rc = wk_engine_open(model, &o, &e, &err))) goto done;
    const struct wk_model_info *mi = wk_engine_info(e);
    if ((rc = mm_st_open(eval, &in, &err))) goto done;
    /* cases: every prefix with a <c>/ids tensor, in name order */
    size_t nt = mm_st_count(in);
    names = calloc(nt ? nt : 1, sizeof *names);
    char(*bufs)[256] = calloc(nt ? nt : 1, 256);
    if (!names || !bufs) {
        free(bufs);
        rc = mm_err_set(&err, MM_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nt; i++) {
        const char *tn = mm_st_at(in, i)->name;
        size_t l = strlen(tn);
        if (l > 4 && l - 4 < 256 && !strcmp(tn + l - 4, "/ids")) {
            memcpy(bufs[n], tn, l - 4);
            bufs[n][l - 4] = '\0';
            names[n] = bufs[n];
            n++;
        }
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    if (!n) {
        free(bufs);
        rc = mm_err_set(&err, MM_FORMAT, "%s: no case (no tensor named <case>/ids)", eval);
        goto done;
    }
    if (!chunk) {
        /* keep each case's step logits near 64 MiB */
        chunk = (16LL << 20) / mi->vocab_size;
        if (chunk > 512) chunk = 512;
        if (chunk < 1) chunk = 1;
    }
    if (chunk > 8192) chunk = 8192; /* the engine's default max_batch_tokens */
    if (!sequential && chunk * n > 8192) chunk = 8192 / n > 0 ? 8192 / n : 1;
    cs = calloc((size_t)n, sizeof *cs);
    if (!cs) {
        free(bufs);
        rc = mm_err_set(&err, MM_NOMEM, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n; i++)
        if ((rc = load_case(e, in, names[i], &cs[i], chunk, &err))) {
            free(bufs);
            goto done;
        }
    free(bufs);
    double t1 = (double)mm_now_ns() * 1e-9;
    if (sequential) {
        for (int32_t i = 0; i < n && !rc; i++) rc = run_cases(e, &cs[i], 1, chunk, &err);
    } else {
        rc = run_cases(e, cs, n, chunk, &err);
    }
    if (rc) goto done;
    double t2 = (double)mm_now_ns() * 1e-9;
    rc = write_out(mi, cs, n, outp, &err);
    int64_t toks = 0;
    for (int32_t i = 0; i < n; i++) toks += cs[i].L + cs[i].n_gen;
    fprintf(stderr, "mmgw-run: %d cases, %lld tokens: load %.2f s, run %.2f s\n", n, (long long)toks, t1 - t0,
            t2 - t1);
done:
    if (rc) fprintf(stderr, "mmgw-run: %s: %s\n", mm_status_name(rc), err.msg);
    for (int32_t i = 0; cs && i < n; i++) free_case(e, &cs[i]);
    free(cs);
    free(names);
    mm_st_close(in);
    wk_engine_close(e);
    return rc ? 1 : 0;
}
