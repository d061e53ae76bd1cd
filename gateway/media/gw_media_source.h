/* Load a media source into memory for the command line: a local file (path or file:// URL), a data: URL
 * (base64 or percent-encoded) or an http(s) URL fetched with libcurl (timeouts, a size cap, limited
 * redirects, http/https only).
 *
 * This is the CLI's "URL -> bytes" step. The gateway does not use it for requests from clients: it fetches
 * through gateway/fetch, which adds the network policy (no private addresses, no DNS rebinding...), and
 * hands the bytes to gw_media_process. Blocking; thread-safe. */
#ifndef GW_MEDIA_SOURCE_H
#define GW_MEDIA_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

struct gw_source_limits {
    uint64_t max_bytes;      /* refuse anything larger (default 512 MiB) */
    long timeout_ms;         /* whole transfer (default 30 s) */
    long connect_timeout_ms; /* (default 5 s) */
    long max_redirects;      /* 0 = default 5; negative = none */
};

/** Bytes owned by their holder; free with gw_bytes_free. */
struct gw_bytes {
    uint8_t *data;
    size_t len;
};

void gw_bytes_free(struct gw_bytes *b);

/** lim NULL = defaults. */
int32_t gw_media_source_load(const char *src, const struct gw_source_limits *lim, struct gw_bytes *out,
                             struct mm_err *err);

/** Decode standard or URL-safe base64 (padding optional, ASCII whitespace skipped). out must hold
 * (len / 4 + 1) * 3 bytes. Returns 0 and sets *out_len, or -1 on a bad character or length. */
int gw_base64_decode(const char *in, size_t len, uint8_t *out, size_t *out_len);

#endif
