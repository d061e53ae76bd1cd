/* libFuzzer target: the safetensors reader on arbitrary bytes. A file it accepts must describe only bytes
 * inside the buffer, past the header, with no two tensors sharing any; every __metadata__ string must read
 * back exactly. The same bytes opened as a file through mm_st_open must give the same answer, so the path
 * wrapper cannot be fooled differently from the in-memory parser. */
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mm_dtype.h"
#include "mm_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct span {
    uintptr_t begin, end;
};

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static uint64_t header_len(const uint8_t *data)
{
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = (h << 8) | data[i];
    return h;
}

/* Every __metadata__ string of the header (as jansson reads it, NULs included) reads back whole. */
static void check_metadata(const struct mm_st_file *f, const uint8_t *data, uint64_t hlen)
{
    json_t *root = json_loadb((const char *)data + 8, (size_t)hlen, JSON_ALLOW_NUL, NULL);
    if (!root) abort(); /* the parser accepted it */
    json_t *meta = json_object_get(root, "__metadata__");
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v)
    {
        const char *got = mm_st_metadata(f, k);
        if (!got || !json_is_string(v) || strlen(got) != json_string_length(v) ||
            memcmp(got, json_string_value(v), json_string_length(v)) != 0)
            abort();
    }
    /* and a key it lacks reads back as absent */
    if (!json_object_get(meta, "format") && mm_st_metadata(f, "format")) abort();
    /* tensors are every other top-level key */
    if (mm_st_count(f) != json_object_size(root) - (meta != NULL)) abort();
    json_decref(root);
}

static void check_file(const struct mm_st_file *f, const uint8_t *data, size_t size)
{
    uintptr_t lo = (uintptr_t)data + 8 + (uintptr_t)header_len(data), hi = (uintptr_t)data + size;
    size_t n = mm_st_count(f);
    struct span *spans = calloc(n ? n : 1, sizeof *spans);
    if (!spans) abort();
    const char *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct mm_st_tensor *t = mm_st_at(f, i);
        if (!t || !t->name || mm_st_find(f, t->name) != t) abort();
        if (prev && strcmp(prev, t->name) >= 0) abort(); /* sorted, so names are unique */
        prev = t->name;
        size_t es = mm_dtype_size(t->dtype);
        if (es == 0 || t->ndim < 0 || t->ndim > MM_ST_MAX_DIMS) abort();
        uint64_t numel = 1, nbytes;
        for (int32_t d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel)) abort();
        if (numel != t->numel || __builtin_mul_overflow(numel, es, &nbytes) || nbytes != t->nbytes) abort();
        uintptr_t b = (uintptr_t)t->data;
        if (b < lo || b > hi || t->nbytes > hi - b) abort();
        spans[i] = (struct span){b, b + (uintptr_t)t->nbytes};
        if (t->nbytes) { /* touch both ends, so ASan sees a pointer that escaped the buffer */
            volatile uint8_t first = ((const uint8_t *)t->data)[0],
                             last = ((const uint8_t *)t->data)[t->nbytes - 1];
            (void)first;
            (void)last;
        }
    }
    if (mm_st_at(f, n) != NULL) abort();
    qsort(spans, n, sizeof *spans, cmp_span);
    uintptr_t end = 0;
    for (size_t i = 0; i < n; i++) {
        if (spans[i].begin == spans[i].end) continue; /* empty tensors take no room */
        if (spans[i].begin < end) abort();
        end = spans[i].end;
    }
    free(spans);
    check_metadata(f, data, header_len(data));
}

/* mm_st_open on the same bytes (a memfd, so no disk) must agree with mm_st_parse. */
static void check_open(const uint8_t *data, size_t size, int32_t want_rc, const struct mm_st_file *want)
{
    int fd = memfd_create("fuzz-st", MFD_CLOEXEC);
    if (fd < 0) return; /* no memfd here: nothing to compare */
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    struct mm_st_file *f = NULL;
    struct mm_err err = {0};
    int32_t rc = mm_st_open(path, &f, &err);
    close(fd);
    if (rc != want_rc || (rc == MM_OK) != (f != NULL)) abort();
    if (rc != MM_OK) {
        if (err.msg[0] == '\0') abort();
        return;
    }
    if (mm_st_count(f) != mm_st_count(want)) abort();
    for (size_t i = 0; i < mm_st_count(f); i++) {
        const struct mm_st_tensor *a = mm_st_at(f, i), *b = mm_st_at(want, i);
        if (strcmp(a->name, b->name) != 0 || a->dtype != b->dtype || a->nbytes != b->nbytes ||
            (uintptr_t)a->data - (uintptr_t)mm_st_at(f, 0)->data !=
                (uintptr_t)b->data - (uintptr_t)mm_st_at(want, 0)->data ||
            memcmp(a->data, b->data, a->nbytes) != 0)
            abort();
    }
    mm_st_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mm_st_file *f = NULL;
    struct mm_err err = {0};
    int32_t rc = mm_st_parse(data, size, "fuzz.safetensors", &f, &err);
    if (rc == MM_OK) {
        if (!f || strcmp(mm_st_path(f), "fuzz.safetensors") != 0) abort();
        check_file(f, data, size);
    } else if (f || rc > 0 || err.code != rc || err.msg[0] == '\0') {
        abort(); /* every failure explains itself and hands nothing out */
    }
    check_open(data, size, rc, f);
    mm_st_close(f);
    return 0;
}
