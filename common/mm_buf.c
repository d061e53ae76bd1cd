#include "mm_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm_arena.h"

void mm_buf_init(struct mm_buf *b, size_t max)
{
    mm_buf_init_arena(b, max, NULL);
}

void mm_buf_init_arena(struct mm_buf *b, size_t max, struct mm_arena *a)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->max = max;
    b->arena = a;
    b->owned = false;
}

void mm_buf_init_with(struct mm_buf *b, size_t max, char *storage, size_t size)
{
    mm_buf_init_arena(b, max, NULL);
    if (storage && size) {
        b->data = storage;
        b->cap = size;
        storage[0] = '\0';
    }
}

void mm_buf_free(struct mm_buf *b)
{
    if (b->owned) free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->owned = false;
}

void mm_buf_reset(struct mm_buf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

int mm_buf_reserve(struct mm_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len - 1) return -1;
    size_t need = b->len + extra + 1;
    if (b->max && b->len + extra > b->max) return -1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = NULL;
    if (b->arena && cap <= MM_BUF_ARENA_MAX) p = mm_arena_alloc(b->arena, cap);
    if (p) { /* the old storage stays with the arena */
        if (b->data) memcpy(p, b->data, b->len);
        p[b->len] = '\0';
        if (b->owned) free(b->data);
        b->owned = false;
    } else if (b->owned) {
        p = realloc(b->data, cap);
        if (!p) return -1;
    } else {
        p = malloc(cap);
        if (!p) return -1;
        if (b->data) memcpy(p, b->data, b->len);
        p[b->len] = '\0';
        b->owned = true;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

int mm_buf_append(struct mm_buf *b, const void *p, size_t n)
{
    if (mm_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int mm_buf_append_str(struct mm_buf *b, const char *s)
{
    return mm_buf_append(b, s, strlen(s));
}

int mm_buf_printf(struct mm_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || mm_buf_reserve(b, (size_t)n)) {
        va_end(ap2);
        return -1;
    }
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
    return 0;
}

void mm_buf_consume(struct mm_buf *b, size_t n)
{
    if (n >= b->len) {
        mm_buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

char *mm_buf_detach(struct mm_buf *b, size_t *len)
{
    char *p = b->data;
    if (p && !b->owned) { /* arena or caller storage: the caller gets its own copy */
        p = malloc(b->len + 1);
        if (p) {
            memcpy(p, b->data, b->len);
            p[b->len] = '\0';
        }
    }
    if (len) *len = p ? b->len : 0;
    b->data = NULL;
    b->len = b->cap = 0;
    b->owned = false;
    return p;
}
