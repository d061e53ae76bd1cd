/* Lifetime of a validated request (see wk_request.h). */
#include "wk_request.h"

#include <stdlib.h>

void wk_request_release_media(struct wk_request *r)
{
    if (!r) return;
    for (int32_t i = 0; i < r->n_media; i++) {
        struct wk_media_item *m = &r->media[i];
        if (m->release) m->release(m->release_arg);
        m->release = NULL;
        m->release_arg = NULL;
        m->pixels = NULL;
    }
}

void wk_request_free(struct wk_request *r)
{
    if (!r) return;
    wk_request_release_media(r);
    for (int32_t i = 0; i < r->n_media; i++) free(r->media[i].runs);
    free(r->media);
    free(r->sp.stop_ids);
    free(r->ids);
    free(r->id);
    free(r);
}
