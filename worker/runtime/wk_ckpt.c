#include "wk_ckpt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mm_dtype.h"

struct shard {
    char *name; /* file name as in the index */
    struct mm_st_file *f;
};

struct wk_ckpt {
    struct shard *shards;
    int32_t n_shards;
    json_t *weight_map; /* NULL for a single file */
    int32_t fp8_block[2];
};

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int32_t add_shard(struct wk_ckpt *c, const char *dir, const char *fname, struct mm_err *err)
{
    for (int32_t i = 0; i < c->n_shards; i++)
        if (strcmp(c->shards[i].name, fname) == 0) return MM_OK;
    if (strchr(fname, '/') || strcmp(fname, "..") == 0)
        return mm_err_set(err, MM_FORMAT, "%s: shard name '%s' is not a plain file name", dir, fname);
    struct shard *ns = realloc(c->shards, sizeof *ns * (size_t)(c->n_shards + 1));
    if (!ns) return mm_err_set(err, MM_NOMEM, "out of memory");
    c->shards = ns;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, fname) >= sizeof path)
        return mm_err_set(err, MM_INVALID, "%s: path too long", dir);
    struct shard *s = &c->shards[c->n_shards];
    s->name = strdup(fname);
    if (!s->name) return mm_err_set(err, MM_NOMEM, "out of memory");
    int32_t rc = mm_st_open(path, &s->f, err);
    if (rc) {
        free(s->name);
        return rc;
    }
    c->n_shards++;
    return MM_OK;
}

int32_t wk_ckpt_open(const char *dir, const int32_t fp8_block[2], struct wk_ckpt **out, struct mm_err *err)
{
    *out = NULL;
    struct wk_ckpt *c = calloc(1, sizeof *c);
    if (!c) return mm_err_set(err, MM_NOMEM, "out of memory");
    c->fp8_block[0] = fp8_block && fp8_block[0] > 0 ? fp8_block[0] : 128;
    c->fp8_block[1] = fp8_block && fp8_block[1] > 0 ? fp8_block[1] : 128;
    char path[4096];
    int32_t rc = MM_OK;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (file_exists(path)) {
        json_error_t je;
        json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        json_t *wm = root ? json_object_get(root, "weight_map") : NULL;
        if (!root || !json_is_object(wm)) {
            rc = mm_err_set(err, MM_FORMAT, "%s: %s", path, root ? "no weight_map object" : je.text);
            json_decref(root);
            goto fail;
        }
        c->weight_map = json_incref(wm);
        json_decref(root);
        const char *k;
        json_t *v;
        json_object_foreach(c->weight_map, k, v)
        {
            if (!json_is_string(v)) {
                rc = mm_err_set(err, MM_FORMAT, "%s: weight_map['%s'] is not a file name", path, k);
                goto fail;
            }
            if ((rc = add_shard(c, dir, json_string_value(v), err))) goto fail;
        }
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (!file_exists(path)) {
            rc = mm_err_set(err, MM_NOT_FOUND, "%s: no model.safetensors or model.safetensors.index.json",
                            dir);
            goto fail;
        }
        if ((rc = add_shard(c, dir, "model.safetensors", err))) goto fail;
    }
    *out = c;
    return MM_OK;
fail:
    wk_ckpt_close(c);
    return rc;
}

void wk_ckpt_close(struct wk_ckpt *c)
{
    if (!c) return;
    for (int32_t i = 0; i < c->n_shards; i++) {
        mm_st_close(c->shards[i].f);
        free(c->shards[i].name);
    }
    free(c->shards);
    if (c->weight_map) json_decref(c->weight_map);
    free(c);
}

/* The tensor and its file; *file is set even when the tensor is missing (the file it should be in). */
static const struct mm_st_tensor *find(const struct wk_ckpt *c, const char *name, const char **file)
{
    if (c->weight_map) {
        json_t *v = json_object_get(c->weight_map, name);
        *file = "model.safetensors.index.json";
        if (!json_is_string(v)) return NULL;
        for (int32_t i = 0; i < c->n_shards; i++)
            if (strcmp(c->shards[i].name, json_string_value(v)) == 0) {
                *file = mm_st_path(c->shards[i].f);
                return mm_st_find(c->shards[i].f, name);
            }
        return NULL;
    }
    *file = mm_st_path(c->shards[0].f);
    return mm_st_find(c->shards[0].f, name);
}

int32_t wk_ckpt_has(const struct wk_ckpt *c, const char *name)
{
    const char *f;
    return find(c, name, &f) != NULL;
}

static void shape_str(char *buf, size_t n, int32_t nd, const int64_t *s)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int32_t i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

int32_t wk_ckpt_weight(const struct wk_ckpt *c, const char *name, int32_t ndim, const int64_t *shape,
                       struct wk_wsrc *out, struct mm_err *err)
{
    memset(out, 0, sizeof *out);
    const char *file = NULL;
    const struct mm_st_tensor *t = find(c, name, &file);
    if (!t) return mm_err_set(err, MM_NOT_FOUND, "%s: tensor '%s' is missing", file, name);
    int same = t->ndim == ndim;
    for (int32_t i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[128], got[128];
        shape_str(want, sizeof want, ndim, shape);
        shape_str(got, sizeof got, t->ndim, t->shape);
        return mm_err_set(err, MM_FORMAT, "%s: tensor '%s' has shape %s, expected %s", file, name, got, want);
    }
    if (t->dtype != MM_DT_F32 && t->dtype != MM_DT_F16 && t->dtype != MM_DT_BF16 && t->dtype != MM_DT_F8_E4M3)
        return mm_err_set(err, MM_UNSUPPORTED,
                          "%s: tensor '%s' has dtype %s (expected BF16, F16, F32 or F8_E4M3)", file, name,
                          mm_dtype_name(t->dtype));
    out->name = t->name;
    out->file = file;
    out->dtype = t->dtype;
    out->ndim = ndim;
    for (int32_t i = 0; i < ndim; i++) out->shape[i] = shape[i];
    out->rows = ndim >= 2 ? shape[0] : 1;
    out->cols =
        ndim >= 2 ? (int64_t)(t->numel / (uint64_t)(shape[0] ? shape[0] : 1)) : (ndim == 1 ? shape[0] : 1);
    out->data = t->data;
    if (t->dtype != MM_DT_F8_E4M3) return MM_OK;

    /* FP8 weights carry block scales beside them (DeepSeek style): <prefix>.weight ->
     * <prefix>.weight_scale_inv */
    char sname[1024];
    size_t nl = strlen(name);
    if (nl + 16 >= sizeof sname) return mm_err_set(err, MM_INVALID, "%s: tensor name too long", file);
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    const char *sfile = NULL;
    const struct mm_st_tensor *s = find(c, sname, &sfile);
    if (!s)
        return mm_err_set(err, MM_NOT_FOUND, "%s: FP8 tensor '%s' has no '%s' beside it", file, name, sname);
    if (ndim != 2) return mm_err_set(err, MM_UNSUPPORTED, "%s: FP8 tensor '%s' is not 2-D", file, name);
    int32_t br = c->fp8_block[0], bc = c->fp8_block[1];
    int64_t sr = (shape[0] + br - 1) / br, sc = (shape[1] + bc - 1) / bc;
    if (s->ndim != 2 || s->shape[0] != sr || s->shape[1] != sc) {
        char got[128];
        shape_str(got, sizeof got, s->ndim, s->shape);
        return mm_err_set(err, MM_FORMAT,
                          "%s: scale '%s' has shape %s, expected [%lld, %lld] for %dx%d blocks", sfile, sname,
                          got, (long long)sr, (long long)sc, br, bc);
    }
    if (s->dtype != MM_DT_F32 && s->dtype != MM_DT_BF16 && s->dtype != MM_DT_F16)
        return mm_err_set(err, MM_UNSUPPORTED, "%s: scale '%s' has dtype %s", sfile, sname,
                          mm_dtype_name(s->dtype));
    out->scale = s->data;
    out->scale_dtype = s->dtype;
    out->scale_rows = sr;
    out->scale_cols = sc;
    out->block_rows = br;
    out->block_cols = bc;
    return MM_OK;
}

static float scale_at(const struct wk_wsrc *s, int64_t i)
{
    switch (s->scale_dtype) {
    case MM_DT_F32: {
        float f;
        memcpy(&f, (const char *)s->scale + 4 * i, 4);
        return f;
    }
    case MM_DT_BF16: {
        uint16_t h;
        memcpy(&h, (const char *)s->scale + 2 * i, 2);
        return mm_bf16_to_f32(h);
    }
    default: {
        uint16_t h;
        memcpy(&h, (const char *)s->scale + 2 * i, 2);
        return mm_f16_to_f32(h);
    }
    }
}

int32_t wk_wsrc_rows_to_f32(const struct wk_wsrc *s, int64_t r0, int64_t r1, float *dst, struct mm_err *err)
{
    size_t esz = mm_dtype_size(s->dtype);
    const char *src = (const char *)s->data + (size_t)(r0 * s->cols) * esz;
    size_t n = (size_t)((r1 - r0) * s->cols);
    if (s->dtype != MM_DT_F8_E4M3) {
        if (s->dtype == MM_DT_F32) {
            memcpy(dst, src, n * 4); /* the mapping may be unaligned for f32: copy bytes */
            return MM_OK;
        }
        if (mm_convert_to_f32(dst, src, s->dtype, n))
            return mm_err_set(err, MM_UNSUPPORTED, "%s: tensor '%s': cannot convert %s", s->file, s->name,
                              mm_dtype_name(s->dtype));
        return MM_OK;
    }
    const uint8_t *q = (const uint8_t *)src;
    for (int64_t r = r0; r < r1; r++) {
        float *d = dst + (r - r0) * s->cols;
        const uint8_t *qr = q + (r - r0) * s->cols;
        int64_t srow = (r / s->block_rows) * s->scale_cols;
        for (int64_t c0 = 0; c0 < s->cols; c0 += s->block_cols) {
            float sc = scale_at(s, srow + c0 / s->block_cols);
            int64_t c1 = c0 + s->block_cols < s->cols ? c0 + s->block_cols : s->cols;
            for (int64_t col = c0; col < c1; col++) d[col] = mm_f8e4m3_to_f32(qr[col]) * sc;
        }
    }
    return MM_OK;
}

int32_t wk_wsrc_to_f32(const struct wk_wsrc *s, float *dst, struct mm_err *err)
{
    return wk_wsrc_rows_to_f32(s, 0, s->rows, dst, err);
}
