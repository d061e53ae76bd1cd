/* Region allocator: many small allocations freed together (nginx pools, h2o mem pools).
 *
 * Ownership: everything allocated from an arena lives until mm_arena_destroy (or mm_arena_reset);
 * there is no per-object free. Cleanups run in reverse order of registration when the arena is
 * destroyed or reset: use them to close fds or drop references to large ref-counted buffers.
 * Not thread-safe: one arena belongs to one request or one thread at a time.
 * Allocation failure returns NULL (the caller maps it to MM_NOMEM); nothing aborts. */
#ifndef MM_ARENA_H
#define MM_ARENA_H

#include <stddef.h>
#include <stdint.h>

struct mm_arena;

/** A new arena whose blocks are at least block_size bytes (0 = 16 KiB). NULL on out of memory. */
struct mm_arena *mm_arena_create(size_t block_size);
/** Run cleanups, free every block and the arena. NULL is fine. */
void mm_arena_destroy(struct mm_arena *a);
/** Run cleanups and forget every allocation, keeping the first block for reuse. */
void mm_arena_reset(struct mm_arena *a);

/** size bytes aligned to 16; NULL on out of memory. */
void *mm_arena_alloc(struct mm_arena *a, size_t size);
/** Zeroed allocation of n * size bytes, with overflow checking. */
void *mm_arena_calloc(struct mm_arena *a, size_t n, size_t size);
/** size bytes aligned to align (a power of two, at most 4096). */
void *mm_arena_alloc_aligned(struct mm_arena *a, size_t size, size_t align);
/** A NUL-terminated copy of s[0..len). */
char *mm_arena_strndup(struct mm_arena *a, const char *s, size_t len);
char *mm_arena_strdup(struct mm_arena *a, const char *s);
/** Register fn(data) to run when the arena is destroyed or reset. Returns 0, or -1 on out of memory. */
int mm_arena_cleanup_add(struct mm_arena *a, void (*fn)(void *data), void *data);
/** Bytes handed out so far (for limits and tests). */
size_t mm_arena_used(const struct mm_arena *a);

#endif
