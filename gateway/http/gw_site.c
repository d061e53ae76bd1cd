/* Sites: one configuration generation (config + routes + TLS context), shared by loops and requests. */
#include "gw_http_internal.h"

#include <stdlib.h>

int32_t gw_site_create(struct gw_config *config, struct gw_routes *routes, const struct gw_site_hooks *hooks,
                       struct gw_site **out, struct mm_err *err)
{
    *out = NULL;
    struct gw_site *s = calloc(1, sizeof *s);
    if (!s) {
        gw_routes_free(routes);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    bool need_tls = false;
    for (size_t i = 0; i < config->http.n_listen; i++) need_tls |= config->http.listen[i].ssl;
    if (need_tls) {
        int32_t rc = gw_tls_ctx_create(config, &s->ssl_ctx, err);
        if (rc) {
            gw_routes_free(routes);
            free(s);
            return rc;
        }
    }
    gw_config_ref(config);
    s->config = config;
    s->routes = routes;
    if (hooks) s->hooks = *hooks;
    atomic_init(&s->refs, 1);
    *out = s;
    return MM_OK;
}

void gw_site_ref(struct gw_site *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void gw_site_unref(struct gw_site *s)
{
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
    if (s->hooks.release) s->hooks.release(s->hooks.ud, s);
    if (s->ssl_ctx) SSL_CTX_free(s->ssl_ctx);
    gw_routes_free(s->routes);
    gw_config_unref(s->config);
    free(s);
}

const struct gw_config *gw_site_config(const struct gw_site *s)
{
    return s->config;
}

void *gw_site_hooks_ud(const struct gw_site *s)
{
    return s->hooks.ud;
}
