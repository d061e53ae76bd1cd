#include "mm_arena.h"

#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

struct arena_block {
    struct arena_block *next;
    size_t size; /* usable bytes after the header */
    size_t used;
    _Alignas(16) unsigned char data[];
};

struct arena_cleanup {
    struct arena_cleanup *next;
    void (*fn)(void *);
    void *data;
};

struct mm_arena {
    struct arena_block *head; /* current block first */
    struct arena_cleanup *cleanups;
    size_t block_size;
    size_t total_used;
};

static struct arena_block *block_new(size_t size)
{
    struct arena_block *b = malloc(sizeof *b + size);
    if (!b) return NULL;
    b->next = NULL;
    b->size = size;
    b->used = 0;
    return b;
}

struct mm_arena *mm_arena_create(size_t block_size)
{
    struct mm_arena *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->block_size = block_size ? block_size : 16384;
    a->head = block_new(a->block_size);
    if (!a->head) {
        free(a);
        return NULL;
    }
    return a;
}

static void run_cleanups(struct mm_arena *a)
{
    struct arena_cleanup *c = a->cleanups;
    a->cleanups = NULL; /* cleanups registered by cleanups are not run twice */
    while (c) {
        c->fn(c->data);
        c = c->next;
    }
}

void mm_arena_destroy(struct mm_arena *a)
{
    if (!a) return;
    run_cleanups(a);
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *n = b->next;
        free(b);
        b = n;
    }
    free(a);
}

void mm_arena_reset(struct mm_arena *a)
{
    run_cleanups(a);
    /* keep the last block in the chain (the first one created) */
    struct arena_block *b = a->head;
    while (b && b->next) {
        struct arena_block *n = b->next;
        free(b);
        b = n;
    }
    a->head = b;
    if (b) b->used = 0;
    a->total_used = 0;
}

void *mm_arena_alloc_aligned(struct mm_arena *a, size_t size, size_t align)
{
    if (align < 16) align = 16;
    if (align > 4096 || (align & (align - 1))) return NULL;
    if (size > SIZE_MAX / 2) return NULL;
    struct arena_block *b = a->head;
    if (b) {
        uintptr_t base = (uintptr_t)b->data;
        uintptr_t p = (base + b->used + align - 1) & ~(uintptr_t)(align - 1);
        size_t end = (size_t)(p - base) + size;
        if (end <= b->size) {
            b->used = end;
            a->total_used += size;
            return (void *)p;
        }
    }
    /* large requests get a block of their own, placed behind the current one so it stays usable */
    size_t need = size + align;
    bool own = need > a->block_size / 4;
    struct arena_block *nb = block_new(own ? need : a->block_size);
    if (!nb) return NULL;
    if (own && b) {
        nb->next = b->next;
        b->next = nb;
    } else {
        nb->next = b;
        a->head = nb;
    }
    uintptr_t base = (uintptr_t)nb->data;
    uintptr_t p = (base + align - 1) & ~(uintptr_t)(align - 1);
    nb->used = (size_t)(p - base) + size;
    a->total_used += size;
    return (void *)p;
}

void *mm_arena_alloc(struct mm_arena *a, size_t size)
{
    return mm_arena_alloc_aligned(a, size, 16);
}

void *mm_arena_calloc(struct mm_arena *a, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = mm_arena_alloc(a, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

char *mm_arena_strndup(struct mm_arena *a, const char *s, size_t len)
{
    char *p = mm_arena_alloc(a, len + 1);
    if (!p) return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *mm_arena_strdup(struct mm_arena *a, const char *s)
{
    return mm_arena_strndup(a, s, strlen(s));
}

int mm_arena_cleanup_add(struct mm_arena *a, void (*fn)(void *data), void *data)
{
    struct arena_cleanup *c = mm_arena_alloc(a, sizeof *c);
    if (!c) return -1;
    c->fn = fn;
    c->data = data;
    c->next = a->cleanups;
    a->cleanups = c;
    return 0;
}

size_t mm_arena_used(const struct mm_arena *a)
{
    return a->total_used;
}
