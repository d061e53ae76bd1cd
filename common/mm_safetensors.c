#include "mm_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mm_dtype.h"
#include "mm_json.h"
#include "mm_outfile.h"

struct mm_st_file {
    char *path;
    void *map; /* NULL when parsed from caller memory */
    size_t map_len;
    size_t n;
    struct mm_st_tensor *tensors; /* sorted by name */
    char **meta_keys, **meta_vals;
    size_t n_meta;
};

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const struct mm_st_tensor *)a)->name, ((const struct mm_st_tensor *)b)->name);
}

struct span {
    uint64_t begin, end;
    size_t idx;
};

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int json_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* The header may hold "\u0000" (JSON_ALLOW_NUL), but dtypes and metadata values are handed out as C strings:
 * a string with a NUL inside would read back cut short, so it is refused rather than silently shortened. */
static int has_nul(json_t *s)
{
    return strlen(json_string_value(s)) != json_string_length(s);
}

static int32_t parse_entry(struct mm_st_file *f, const char *label, const char *name, json_t *v,
                           const unsigned char *data, uint64_t data_len, struct mm_st_tensor *t,
                           struct mm_err *err)
{
    if (!json_is_object(v))
        return mm_err_set(err, MM_FORMAT, "%s: tensor '%s': entry is not an object", label, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) || json_array_size(jo) != 2)
        return mm_err_set(err, MM_FORMAT, "%s: tensor '%s': needs dtype, shape and data_offsets[2]", label,
                          name);
    if (has_nul(jd))
        return mm_err_set(err, MM_FORMAT, "%s: tensor '%s': dtype holds a NUL byte", label, name);
    t->dtype = mm_dtype_parse(json_string_value(jd));
    if (t->dtype == MM_DT_INVALID)
        return mm_err_set(err, MM_UNSUPPORTED, "%s: tensor '%s': unknown dtype '%s'", label, name,
                          json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > MM_ST_MAX_DIMS)
        return mm_err_set(err, MM_FORMAT, "%s: tensor '%s': %zu dimensions (max %d)", label, name, nd,
                          MM_ST_MAX_DIMS);
    t->ndim = (int32_t)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (json_u64(json_array_get(js, i), &d))
            return mm_err_set(err, MM_FORMAT, "%s: tensor '%s': bad shape", label, name);
        if (d && numel > UINT64_MAX / d / 8)
            return mm_err_set(err, MM_FORMAT, "%s: tensor '%s': shape overflows", label, name);
        numel *= d;
        t->shape[i] = (int64_t)d;
    }
    uint64_t b, e;
    if (json_u64(json_array_get(jo, 0), &b) || json_u64(json_array_get(jo, 1), &e) || e < b)
        return mm_err_set(err, MM_FORMAT, "%s: tensor '%s': bad data_offsets", label, name);
    if (e > data_len)
        return mm_err_set(err, MM_FORMAT,
                          "%s: tensor '%s': data [%llu, %llu) past the end of the file (%llu bytes of data)",
                          label, name, (unsigned long long)b, (unsigned long long)e,
                          (unsigned long long)data_len);
    uint64_t nbytes = numel * mm_dtype_size(t->dtype);
    if (e - b != nbytes)
        return mm_err_set(
            err, MM_FORMAT, "%s: tensor '%s': %llu bytes for shape and dtype %s, offsets give %llu", label,
            name, (unsigned long long)nbytes, json_string_value(jd), (unsigned long long)(e - b));
    t->numel = numel;
    t->nbytes = nbytes;
    t->data = data + b;
    t->name = strdup(name);
    if (!t->name) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    (void)f;
    return MM_OK;
}

int32_t mm_st_parse(const void *buf, size_t len, const char *label, struct mm_st_file **out,
                    struct mm_err *err)
{
    *out = NULL;
    if (!label) label = "<memory>";
    if (len < 8)
        return mm_err_set(err, MM_FORMAT, "%s: too short for a safetensors file (%zu bytes)", label, len);
    const unsigned char *p = buf;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > MM_ST_MAX_HEADER)
        return mm_err_set(err, MM_FORMAT, "%s: header of %llu bytes is over the %u-byte cap", label,
                          (unsigned long long)hlen, MM_ST_MAX_HEADER);
    if (hlen > len - 8)
        return mm_err_set(err, MM_FORMAT, "%s: header of %llu bytes runs past the end of the file", label,
                          (unsigned long long)hlen);
    json_error_t jerr;
    json_t *root =
        json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!root) return mm_err_set(err, MM_FORMAT, "%s: header is not valid JSON: %s", label, jerr.text);
    struct mm_st_file *f = calloc(1, sizeof *f);
    int32_t rc = MM_OK;
    struct span *spans = NULL;
    if (!f || !(f->path = strdup(label))) {
        rc = mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = mm_err_set(err, MM_FORMAT, "%s: header is not a JSON object", label);
        goto fail;
    }
    size_t cap = json_object_size(root);
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    spans = calloc(cap ? cap : 1, sizeof *spans);
    if (!f->tensors || !spans) {
        rc = mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
        goto fail;
    }
    const unsigned char *data = p + 8 + hlen;
    uint64_t data_len = len - 8 - hlen;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                rc = mm_err_set(err, MM_FORMAT, "%s: __metadata__ is not an object", label);
                goto fail;
            }
            size_t nm = json_object_size(val);
            f->meta_keys = calloc(nm ? nm : 1, sizeof(char *));
            f->meta_vals = calloc(nm ? nm : 1, sizeof(char *));
            if (!f->meta_keys || !f->meta_vals) {
                rc = mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
                goto fail;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv)
            {
                if (!json_is_string(mv) || has_nul(mv)) {
                    rc = mm_err_set(err, MM_FORMAT, "%s: __metadata__ value of '%s' is %s", label, mk,
                                    json_is_string(mv) ? "a string holding a NUL byte" : "not a string");
                    goto fail;
                }
                f->meta_keys[f->n_meta] = strdup(mk);
                f->meta_vals[f->n_meta] = strdup(json_string_value(mv));
                f->n_meta++;
                if (!f->meta_keys[f->n_meta - 1] || !f->meta_vals[f->n_meta - 1]) {
                    rc = mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
                    goto fail;
                }
            }
            continue;
        }
        struct mm_st_tensor *t = &f->tensors[f->n];
        rc = parse_entry(f, label, key, val, data, data_len, t, err);
        if (rc) goto fail;
        spans[f->n] = (struct span){(uint64_t)((const unsigned char *)t->data - data),
                                    (uint64_t)((const unsigned char *)t->data - data) + t->nbytes, f->n};
        f->n++;
    }
    /* no two tensors may share bytes (empty tensors take no room and cannot overlap) */
    qsort(spans, f->n, sizeof *spans, cmp_span);
    uint64_t last_end = 0;
    const char *last_name = NULL;
    for (size_t i = 0; i < f->n; i++) {
        if (spans[i].begin == spans[i].end) continue;
        if (last_name && spans[i].begin < last_end) {
            rc = mm_err_set(err, MM_FORMAT, "%s: tensors '%s' and '%s' overlap", label, last_name,
                            f->tensors[spans[i].idx].name);
            goto fail;
        }
        last_end = spans[i].end;
        last_name = f->tensors[spans[i].idx].name;
    }
    qsort(f->tensors, f->n, sizeof *f->tensors, cmp_tensor_name);
    free(spans);
    json_decref(root);
    *out = f;
    return MM_OK;
fail:
    free(spans);
    json_decref(root);
    mm_st_close(f);
    return rc;
}

int32_t mm_st_open(const char *path, struct mm_st_file **out, struct mm_err *err)
{
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO would otherwise wait for a writer before fstat could refuse it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return mm_err_set(err, errno == ENOENT ? MM_NOT_FOUND : MM_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mm_err_set(err, MM_IO, "%s: not a regular file", path);
    }
    size_t len = (size_t)st.st_size;
    if (len < 8) {
        close(fd);
        return mm_err_set(err, MM_FORMAT, "%s: too short for a safetensors file (%zu bytes)", path, len);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return mm_err_set(err, MM_IO, "%s: mmap: %s", path, strerror(errno));
    int32_t rc = mm_st_parse(map, len, path, out, err);
    if (rc) {
        munmap(map, len);
        return rc;
    }
    (*out)->map = map;
    (*out)->map_len = len;
    return MM_OK;
}

void mm_st_close(struct mm_st_file *f)
{
    if (!f) return;
    if (f->tensors)
        for (size_t i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->tensors);
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    free(f);
}

const char *mm_st_path(const struct mm_st_file *f)
{
    return f->path;
}

size_t mm_st_count(const struct mm_st_file *f)
{
    return f->n;
}

const struct mm_st_tensor *mm_st_at(const struct mm_st_file *f, size_t i)
{
    return i < f->n ? &f->tensors[i] : NULL;
}

const struct mm_st_tensor *mm_st_find(const struct mm_st_file *f, const char *name)
{
    struct mm_st_tensor key = {.name = name};
    return bsearch(&key, f->tensors, f->n, sizeof key, cmp_tensor_name);
}

const char *mm_st_metadata(const struct mm_st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

/* ---- writer ---- */

struct wtensor {
    char *name;
    int32_t dtype, ndim;
    int64_t shape[MM_ST_MAX_DIMS];
    void *data;
    size_t nbytes;
};

struct mm_st_writer {
    struct wtensor *t;
    size_t n, cap;
    json_t *meta;
};

struct mm_st_writer *mm_st_writer_create(void)
{
    return calloc(1, sizeof(struct mm_st_writer));
}

void mm_st_writer_destroy(struct mm_st_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    if (w->meta) json_decref(w->meta);
    free(w);
}

int32_t mm_st_writer_add(struct mm_st_writer *w, const char *name, int32_t dtype, int32_t ndim,
                         const int64_t *shape, const void *data, size_t nbytes, struct mm_err *err)
{
    if (ndim < 0 || ndim > MM_ST_MAX_DIMS || mm_dtype_size(dtype) == 0 || strcmp(name, "__metadata__") == 0)
        return mm_err_set(err, MM_INVALID, "tensor '%s': bad dtype or rank", name);
    uint64_t numel = 1, need;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0) return mm_err_set(err, MM_INVALID, "tensor '%s': negative dimension", name);
        /* a wrapped count could match nbytes (2^62 x 4 wraps to 0) and write a file the reader refuses */
        if (__builtin_mul_overflow(numel, (uint64_t)shape[i], &numel))
            return mm_err_set(err, MM_INVALID, "tensor '%s': shape overflows", name);
    }
    if (__builtin_mul_overflow(numel, (uint64_t)mm_dtype_size(dtype), &need))
        return mm_err_set(err, MM_INVALID, "tensor '%s': shape overflows", name);
    if (need != nbytes)
        return mm_err_set(err, MM_INVALID, "tensor '%s': %zu bytes given, shape needs %llu", name, nbytes,
                          (unsigned long long)need);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return mm_err_set(err, MM_INVALID, "tensor '%s' added twice", name);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        struct wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return mm_err_set(err, MM_NOMEM, "out of memory");
        w->t = nt;
        w->cap = cap;
    }
    struct wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->data = malloc(nbytes ? nbytes : 1);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    if (nbytes) memcpy(t->data, data, nbytes);
    t->nbytes = nbytes;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int32_t i = 0; i < ndim; i++) t->shape[i] = shape[i];
    w->n++;
    return MM_OK;
}

int32_t mm_st_writer_add_metadata(struct mm_st_writer *w, const char *key, const char *value,
                                  struct mm_err *err)
{
    if (!w->meta && !(w->meta = json_object())) return mm_err_set(err, MM_NOMEM, "out of memory");
    if (json_object_set_new(w->meta, key, json_string(value)))
        return mm_err_set(err, MM_INVALID, "metadata '%s': not valid UTF-8", key);
    return MM_OK;
}

int32_t mm_st_writer_save(struct mm_st_writer *w, const char *path, struct mm_err *err)
{
    json_t *root = json_object();
    if (!root) return mm_err_set(err, MM_NOMEM, "out of memory");
    if (w->meta) json_object_set(root, "__metadata__", w->meta);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        struct wtensor *t = &w->t[i];
        json_t *shape = json_array();
        for (int32_t d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype", mm_dtype_name(t->dtype), "shape", shape,
                              "data_offsets", (json_int_t)off, (json_int_t)(off + t->nbytes));
        if (!e || json_object_set_new(root, t->name, e)) {
            json_decref(root);
            return mm_err_set(err, MM_INVALID, "tensor '%s': cannot encode header", t->name);
        }
        off += t->nbytes;
    }
    char *hdr = mm_json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!hdr) return mm_err_set(err, MM_NOMEM, "out of memory");
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7; /* data starts 8-aligned */
    struct mm_outfile out; /* a temporary file renamed into place; links and devices written through */
    int32_t rc = mm_outfile_open(&out, path, err);
    if (rc != MM_OK) {
        free(hdr);
        return rc;
    }
    FILE *fp = out.f;
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(lenb, 1, 8, fp) == 8 && fwrite(hdr, 1, hl, fp) == hl;
    for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', fp) != EOF;
    free(hdr);
    for (size_t i = 0; ok && i < w->n; i++)
        ok = fwrite(w->t[i].data, 1, w->t[i].nbytes, fp) == w->t[i].nbytes;
    return mm_outfile_close(&out, ok, err);
}
