/* jansson's memory, served from a request's arena where a caller says so.
 *
 * A process that calls mm_json_alloc_install() (mmgw does, first thing in main) routes every jansson
 * allocation through two functions: on a thread that has entered an arena scope (mm_json_arena_enter),
 * small allocations are carved from that arena and their frees cost nothing (the arena takes them back
 * when it is reset or destroyed); everywhere else they come from malloc as before. A JSON request body
 * parsed, templated and dropped within one request then costs no malloc/free pair per node.
 *
 * Rules for a scope's owner: every JSON value allocated inside a scope must be dropped (json_decref) or
 * left alone before its arena is reset or destroyed; values made elsewhere may be used and dropped inside
 * a scope, and values made inside may be dropped outside (their frees are recognised). Memory that
 * jansson hands to the caller (json_dumps) must not be released with free(): use mm_json_dumps instead,
 * whose result is plain malloc memory.
 *
 * Without mm_json_alloc_install (tools, tests, the worker) scopes change nothing. */
#ifndef MM_JSON_H
#define MM_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "mm_arena.h"

/** Largest single allocation served from a scope's arena; larger ones (long strings) use malloc. */
#define MM_JSON_ARENA_MAX_ALLOC 2048

/** Route jansson's allocations through the scope-aware allocator. Call once, before any JSON value is
 * made (the allocator tags its blocks; a value made before could not be freed). Idempotent. */
void mm_json_alloc_install(void);
/** Whether mm_json_alloc_install ran in this process. */
int mm_json_alloc_installed(void);

struct mm_json_scope {
    struct mm_arena *arena;
    size_t cap;
};

/** Serve this thread's jansson allocations from a (at most up to `cap` bytes of arena use in total, as
 * mm_arena_used counts them; past that, malloc). Returns the previous scope for mm_json_arena_leave.
 * a = NULL leaves no scope active. */
struct mm_json_scope mm_json_arena_enter(struct mm_arena *a, size_t cap);
void mm_json_arena_leave(struct mm_json_scope prev);

/** json_dumps into malloc memory (free() it). NULL on failure, as json_dumps. */
char *mm_json_dumps(const json_t *json, size_t flags);

#endif
