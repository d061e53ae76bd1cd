/* API keys (`api_key KEY ...;` in the http block): a request to the API's routes must carry
 * `Authorization: Bearer KEY` with one of them, else a 401 in OpenAI's shape (code "invalid_api_key") with
 * `WWW-Authenticate: Bearer`. Keys are kept as SHA-256 digests and compared in constant time, so neither a
 * key's bytes nor its length show in the time an answer takes. */
#ifndef GW_API_AUTH_H
#define GW_API_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "gw_http.h"
#include "mm_status.h"

struct gw_api_auth {
    unsigned char (*digest)[32]; /* SHA-256 of each key */
    size_t n;                    /* 0: no key is asked */
};

/** Digest the configured keys. */
int32_t gw_api_auth_init(struct gw_api_auth *a, const char *const *keys, size_t n, struct mm_err *err);
void gw_api_auth_free(struct gw_api_auth *a);

/** Whether req may go on; when not, the 401 has been sent. */
bool gw_api_auth_check(const struct gw_api_auth *a, struct gw_request *req);

#endif
