/* API keys (see gw_api_auth.h). */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gw_api_auth.h"

static int sha256(const char *data, size_t len, unsigned char out[32])
{
    unsigned int n = 0;
    return EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) == 1 && n == 32 ? 0 : -1;
}

int32_t gw_api_auth_init(struct gw_api_auth *a, const char *const *keys, size_t n, struct mm_err *err)
{
    a->digest = NULL;
    a->n = 0;
    if (n == 0) return MM_OK;
    a->digest = calloc(n, sizeof *a->digest);
    if (!a->digest) return mm_err_set(err, MM_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (sha256(keys[i], strlen(keys[i]), a->digest[i]) != 0) {
            gw_api_auth_free(a);
            return mm_err_set(err, MM_ERROR, "api_key: SHA-256 is not available");
        }
    a->n = n;
    return MM_OK;
}

void gw_api_auth_free(struct gw_api_auth *a)
{
    free(a->digest);
    a->digest = NULL;
    a->n = 0;
}

static bool refuse(struct gw_request *req, const char *msg)
{
    gw_http_add_header(req, "www-authenticate", "Bearer");
    gw_http_send_error(req, 401, "invalid_request_error", msg, NULL, "invalid_api_key");
    return false;
}

bool gw_api_auth_check(const struct gw_api_auth *a, struct gw_request *req)
{
    if (a->n == 0) return true;
    const char *h = gw_request_header(req, "authorization");
    if (!h)
        return refuse(req, "You didn't provide an API key: send it in an 'Authorization: Bearer KEY' header");
    while (*h == ' ' || *h == '\t') h++;
    if (strncasecmp(h, "bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
        return refuse(req, "The Authorization header is not 'Bearer KEY'");
    h += 7;
    while (*h == ' ' || *h == '\t') h++;
    size_t len = strlen(h);
    while (len && (h[len - 1] == ' ' || h[len - 1] == '\t')) len--;
    unsigned char d[32];
    if (len == 0 || sha256(h, len, d) != 0) return refuse(req, "Incorrect API key provided");
    /* every key is compared, whichever matches */
    int match = 0;
    for (size_t i = 0; i < a->n; i++) match |= CRYPTO_memcmp(d, a->digest[i], sizeof d) == 0;
    return match ? true : refuse(req, "Incorrect API key provided");
}
