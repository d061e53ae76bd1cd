/* TLS server contexts: certificate and key from the config, ALPN choosing h2 or http/1.1. */
#include "gw_http_internal.h"

#include <openssl/err.h>
#include <stdio.h>
#include <string.h>

static void ssl_error_text(char *buf, size_t size)
{
    unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, buf, size);
    else
        snprintf(buf, size, "unknown error");
    ERR_clear_error();
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg)
{
    bool h2 = arg != NULL;
    /* our preference, not the client's order: h2 when allowed, else http/1.1 */
    static const unsigned char h2_proto[] = "\x02h2";
    static const unsigned char h1_proto[] = "\x08http/1.1";
    for (int pass = h2 ? 0 : 1; pass < 2; pass++) {
        const unsigned char *want = pass == 0 ? h2_proto : h1_proto;
        for (unsigned int i = 0; i < inlen;) {
            unsigned int len = in[i];
            if (i + 1 + len > inlen) break;
            if (len == want[0] && memcmp(in + i + 1, want + 1, len) == 0) {
                *out = in + i + 1;
                *outlen = (unsigned char)len;
                return SSL_TLSEXT_ERR_OK;
            }
            i += 1 + len;
        }
    }
    return SSL_TLSEXT_ERR_NOACK; /* no ALPN agreed: HTTP/1.1 */
}

static int32_t tls_ctx_create(const struct gw_config *config, SSL_CTX **out, struct mm_err *err);

/* Errors point at the first ssl listener, so `mmgw -t` shows where TLS was asked for. */
int32_t gw_tls_ctx_create(const struct gw_config *config, SSL_CTX **out, struct mm_err *err)
{
    int32_t rc = tls_ctx_create(config, out, err);
    if (rc && err) {
        for (size_t i = 0; i < config->http.n_listen; i++) {
            const struct gw_listen_conf *l = &config->http.listen[i];
            if (l->ssl) {
                mm_err_prefix(err, "%s:%d", l->file, l->line);
                break;
            }
        }
    }
    return rc;
}

static int32_t tls_ctx_create(const struct gw_config *config, SSL_CTX **out, struct mm_err *err)
{
    const struct gw_http_conf *h = &config->http;
    char e[256];
    if (!h->ssl_certificate || !h->ssl_certificate_key)
        return mm_err_set(err, MM_INVALID, "ssl listeners need ssl_certificate and ssl_certificate_key");
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) return mm_err_set(err, MM_NOMEM, "cannot create a TLS context");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx,
                        SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS); /* idle TLS connections keep no I/O buffers */
    if (SSL_CTX_use_certificate_chain_file(ctx, h->ssl_certificate) != 1) {
        ssl_error_text(e, sizeof e);
        SSL_CTX_free(ctx);
        return mm_err_set(err, MM_INVALID, "cannot load certificate \"%s\": %s", h->ssl_certificate, e);
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, h->ssl_certificate_key, SSL_FILETYPE_PEM) != 1) {
        ssl_error_text(e, sizeof e);
        SSL_CTX_free(ctx);
        return mm_err_set(err, MM_INVALID, "cannot load certificate key \"%s\": %s", h->ssl_certificate_key,
                          e);
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ssl_error_text(e, sizeof e);
        SSL_CTX_free(ctx);
        return mm_err_set(err, MM_INVALID, "certificate \"%s\" and key \"%s\" do not match: %s",
                          h->ssl_certificate, h->ssl_certificate_key, e);
    }
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, h->http2 ? (void *)1 : NULL);
    *out = ctx;
    return MM_OK;
}

int32_t gw_tls_check_config(const struct gw_config *config, struct mm_err *err)
{
    bool need = false;
    for (size_t i = 0; i < config->http.n_listen; i++) need |= config->http.listen[i].ssl;
    if (!need) return MM_OK;
    SSL_CTX *ctx;
    int32_t rc = gw_tls_ctx_create(config, &ctx, err);
    if (rc == MM_OK) SSL_CTX_free(ctx);
    return rc;
}
