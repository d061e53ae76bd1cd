/* A growable byte buffer owned by its user (heap-backed; mm_buf_free releases it).
 * Appends fail with -1 instead of aborting when memory runs out or the optional cap is hit. */
#ifndef MM_BUF_H
#define MM_BUF_H

#include <stddef.h>
#include <stdint.h>

struct mm_buf {
    char *data; /* always NUL-terminated after a successful append (not counted in len) */
    size_t len;
    size_t cap;
    size_t max; /* 0 = no limit; appends past it fail */
};

void mm_buf_init(struct mm_buf *b, size_t max);
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
