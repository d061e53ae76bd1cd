/* Test fixture for the chat-template and output-parser tests: a host API backed by malloc that counts
 * live allocations (so tests see leaks without ASan too), an error sink, a byte sink and an event recorder
 * for the output parser. A test fixture only: nothing here ships. */
#ifndef CHAT_FIXTURE_H
#define CHAT_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include <mmgw/plugin.h>

/* The host's error sink (the real host defines its own; plugins only pass a pointer to set_error). */
struct mmgw_error {
    int32_t code;
    char msg[512];
};

/** The fake host. Allocation fails on purpose once fixture_fail_after allocations have succeeded (-1:
 * never), to drive out-of-memory paths. */
extern const struct mmgw_host_api fixture_host;
extern long fixture_live_allocs;
extern long fixture_fail_after;

/** A growable byte buffer that is also a struct mmgw_sink. */
struct fixture_text {
    char *p;
    size_t len, cap;
};
struct mmgw_sink fixture_text_sink(struct fixture_text *t);
void fixture_text_free(struct fixture_text *t);

/** Records output-parser events: per kind concatenations and every event in order. */
#define FIXTURE_MAX_TOOLS 16
struct fixture_events {
    struct fixture_text content, reasoning;
    struct fixture_text tool_name[FIXTURE_MAX_TOOLS], tool_args[FIXTURE_MAX_TOOLS];
    int n_tools;       /* 1 + the highest tool index seen */
    int n_events;      /* every emit call */
    int n_args_events; /* TOOL_ARGS events */
    int bad_order;     /* an event broke the protocol: args before its name, a name twice, an index skipped */
    int name_seen[FIXTURE_MAX_TOOLS];
};
struct mmgw_out_sink fixture_event_sink(struct fixture_events *e);
void fixture_events_free(struct fixture_events *e);
/** 1 if a and b have the same concatenations (content, reasoning, each tool's name and arguments). */
int fixture_events_equal(const struct fixture_events *a, const struct fixture_events *b);
/** Print both recordings to stderr (for a failing comparison). */
void fixture_events_dump(const char *label, const struct fixture_events *e);

/** Read a whole file (NUL-terminated); NULL if it cannot be read. Caller frees. */
char *fixture_read_file(const char *path, size_t *len);

#endif
