/* Staged tensor uploads: a small list under one mutex (a handful of uploads are live at a time). */
#include "wk_uploads.h"

#include "mm_clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct wk_upload {
    struct wk_upload *next;
    char id[WK_UPLOAD_ID_MAX + 1];
    uint8_t *data;
    uint64_t total, received;
    int64_t created_ms;
};

struct wk_uploads {
    pthread_mutex_t mu;
    struct wk_upload *head;
    uint64_t bytes, max_bytes;
    int64_t ttl_ms;
};

struct wk_uploads *wk_uploads_create(uint64_t max_bytes, int64_t ttl_ms)
{
    struct wk_uploads *u = calloc(1, sizeof(*u));
    if (!u) return NULL;
    pthread_mutex_init(&u->mu, NULL);
    u->max_bytes = max_bytes;
    u->ttl_ms = ttl_ms;
    return u;
}

void wk_upload_free(void *p)
{
    struct wk_upload *up = p;
    if (!up) return;
    free(up->data);
    free(up);
}

void wk_uploads_destroy(struct wk_uploads *u)
{
    if (!u) return;
    while (u->head) {
        struct wk_upload *n = u->head->next;
        wk_upload_free(u->head);
        u->head = n;
    }
    pthread_mutex_destroy(&u->mu);
    free(u);
}

/* Caller holds the lock. Returns the link that points at the upload, or NULL. */
static struct wk_upload **find_locked(struct wk_uploads *u, const char *id)
{
    for (struct wk_upload **pp = &u->head; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->id, id) == 0) return pp;
    return NULL;
}

static void unlink_locked(struct wk_uploads *u, struct wk_upload **pp)
{
    struct wk_upload *up = *pp;
    *pp = up->next;
    u->bytes -= up->total;
    up->next = NULL;
}

static void sweep_locked(struct wk_uploads *u, int64_t now_ms)
{
    struct wk_upload **pp = &u->head;
    while (*pp) {
        if (now_ms - (*pp)->created_ms > u->ttl_ms) {
            struct wk_upload *up = *pp;
            unlink_locked(u, pp);
            wk_upload_free(up);
        } else {
            pp = &(*pp)->next;
        }
    }
}

void wk_uploads_sweep(struct wk_uploads *u, int64_t now_ms)
{
    pthread_mutex_lock(&u->mu);
    sweep_locked(u, now_ms);
    pthread_mutex_unlock(&u->mu);
}

int32_t wk_uploads_append(struct wk_uploads *u, const char *id, uint64_t total_bytes, uint64_t offset,
                          const void *data, size_t len, uint64_t *received, struct mm_err *err)
{
    if (!id || !id[0]) return mm_err_set(err, MM_INVALID, "upload_id is empty");
    if (strlen(id) > WK_UPLOAD_ID_MAX)
        return mm_err_set(err, MM_INVALID, "upload_id is longer than %d bytes", WK_UPLOAD_ID_MAX);
    int32_t rc = MM_OK;
    pthread_mutex_lock(&u->mu);
    sweep_locked(u, mm_now_ms());
    struct wk_upload **pp = find_locked(u, id);
    struct wk_upload *up = pp ? *pp : NULL;
    if (offset == 0 && !up) {
        if (total_bytes == 0) {
            rc = mm_err_set(err, MM_INVALID, "upload '%s': the first chunk must give total_bytes > 0", id);
            goto out;
        }
        /* checked before the upload exists: a refused first chunk must leave nothing staged (it would hold
         * total_bytes of the cap until the time-to-live ran out) */
        if (len > total_bytes) {
            rc = mm_err_set(err, MM_INVALID, "upload '%s': chunk of %zu bytes at 0 passes total_bytes %llu",
                            id, len, (unsigned long long)total_bytes);
            goto out;
        }
        if (total_bytes > u->max_bytes || u->bytes + total_bytes > u->max_bytes) {
            rc = mm_err_set(err, MM_EXHAUSTED,
                            "upload '%s': %llu bytes do not fit (staged %llu of %llu bytes)", id,
                            (unsigned long long)total_bytes, (unsigned long long)u->bytes,
                            (unsigned long long)u->max_bytes);
            goto out;
        }
        up = calloc(1, sizeof(*up));
        uint8_t *buf = up ? malloc(total_bytes) : NULL;
        if (!buf) {
            free(up);
            rc = mm_err_set(err, MM_NOMEM, "upload '%s': cannot allocate %llu bytes", id,
                            (unsigned long long)total_bytes);
            goto out;
        }
        strcpy(up->id, id);
        up->data = buf;
        up->total = total_bytes;
        up->created_ms = mm_now_ms();
        up->next = u->head;
        u->head = up;
        u->bytes += total_bytes;
    } else if (!up) {
        rc = mm_err_set(err, MM_INVALID, "upload '%s': chunk at offset %llu but no upload was started", id,
                        (unsigned long long)offset);
        goto out;
    } else if (offset == 0 && up->received > 0) {
        rc = mm_err_set(err, MM_INVALID, "upload '%s' already exists", id);
        goto out;
    }
    if (total_bytes && total_bytes != up->total) {
        rc = mm_err_set(err, MM_INVALID, "upload '%s': total_bytes changed from %llu to %llu", id,
                        (unsigned long long)up->total, (unsigned long long)total_bytes);
        goto out;
    }
    if (offset != up->received) {
        rc = mm_err_set(err, MM_INVALID,
                        "upload '%s': chunk at offset %llu, expected %llu (chunks arrive in order)", id,
                        (unsigned long long)offset, (unsigned long long)up->received);
        goto out;
    }
    if (len > up->total - up->received) {
        rc = mm_err_set(err, MM_INVALID, "upload '%s': chunk of %zu bytes at %llu passes total_bytes %llu",
                        id, len, (unsigned long long)offset, (unsigned long long)up->total);
        goto out;
    }
    if (len) memcpy(up->data + up->received, data, len);
    up->received += len;
    if (received) *received = up->received;
out:
    pthread_mutex_unlock(&u->mu);
    return rc;
}

int32_t wk_uploads_complete(struct wk_uploads *u, const char *id)
{
    pthread_mutex_lock(&u->mu);
    struct wk_upload **pp = find_locked(u, id);
    int32_t done = pp && (*pp)->received == (*pp)->total;
    pthread_mutex_unlock(&u->mu);
    return done;
}

void wk_uploads_drop(struct wk_uploads *u, const char *id)
{
    pthread_mutex_lock(&u->mu);
    struct wk_upload **pp = find_locked(u, id);
    struct wk_upload *up = NULL;
    if (pp) {
        up = *pp;
        unlink_locked(u, pp);
    }
    pthread_mutex_unlock(&u->mu);
    wk_upload_free(up);
}

int32_t wk_uploads_take(struct wk_uploads *u, const char *id, struct wk_upload **out, struct mm_err *err)
{
    *out = NULL;
    pthread_mutex_lock(&u->mu);
    sweep_locked(u, mm_now_ms());
    struct wk_upload **pp = find_locked(u, id);
    int32_t rc = MM_OK;
    if (!pp) {
        rc = mm_err_set(err, MM_NOT_FOUND,
                        "upload_id '%s' is not staged (never sent, expired or already used)", id);
    } else if ((*pp)->received != (*pp)->total) {
        rc = mm_err_set(err, MM_NOT_FOUND, "upload_id '%s' is incomplete (%llu of %llu bytes)", id,
                        (unsigned long long)(*pp)->received, (unsigned long long)(*pp)->total);
    } else {
        *out = *pp;
        unlink_locked(u, pp);
    }
    pthread_mutex_unlock(&u->mu);
    return rc;
}

uint64_t wk_uploads_bytes(struct wk_uploads *u)
{
    pthread_mutex_lock(&u->mu);
    uint64_t b = u->bytes;
    pthread_mutex_unlock(&u->mu);
    return b;
}

const void *wk_upload_data(const struct wk_upload *up)
{
    return up->data;
}

uint64_t wk_upload_size(const struct wk_upload *up)
{
    return up->total;
}
