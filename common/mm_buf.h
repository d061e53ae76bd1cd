/* A growable byte buffer owned by its user (heap-backed; mm_buf_free releases it).
 * Appends fail with -1 instead of aborting when memory runs out or the optional cap is hit.
 *
 * Two variants save the malloc/free pair of short-lived small buffers (the bytes of one token, a request's
 * prompt and answer): mm_buf_init_arena takes its storage from an arena while the buffer stays within
 * MM_BUF_ARENA_MAX bytes, and mm_buf_init_with starts in storage the caller provides (a stack array).
 * Past that the buffer moves to the heap as any other. Every function below works on all three; only a
 * buffer's data pointer must never be free()d or realloc()ed by its user (mm_buf_detach gives malloc
 * memory in every case). A zeroed struct is a valid empty heap buffer. */
#ifndef MM_BUF_H
#define MM_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mm_arena;

/** The largest capacity a buffer made by mm_buf_init_arena takes from its arena. */
#define MM_BUF_ARENA_MAX 4096

struct mm_buf {
    char *data; /* always NUL-terminated after a successful append (not counted in len) */
    size_t len;
    size_t cap;
    size_t max;             /* 0 = no limit; appends past it fail */
    struct mm_arena *arena; /* growth up to MM_BUF_ARENA_MAX comes from here (NULL: the heap) */
    bool owned;             /* data is heap memory of this buffer's (mm_buf_free releases it) */
};

void mm_buf_init(struct mm_buf *b, size_t max);
/** A buffer whose storage comes from arena a (which must outlive it) while it is small. a may be NULL. */
void mm_buf_init_arena(struct mm_buf *b, size_t max, struct mm_arena *a);
/** A buffer that starts in storage[0..size) (which must outlive it, or until it grows past size). */
void mm_buf_init_with(struct mm_buf *b, size_t max, char *storage, size_t size);
void mm_buf_free(struct mm_buf *b);
void mm_buf_reset(struct mm_buf *b);
int mm_buf_reserve(struct mm_buf *b, size_t extra);
int mm_buf_append(struct mm_buf *b, const void *p, size_t n);
int mm_buf_append_str(struct mm_buf *b, const char *s);
int mm_buf_printf(struct mm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Remove the first n bytes. */
void mm_buf_consume(struct mm_buf *b, size_t n);
/** Hand the data to the caller (free() it) and reset the buffer. */
char *mm_buf_detach(struct mm_buf *b, size_t *len);

#endif
