/* libFuzzer target: the staged-upload store (wk_uploads.c) driven by what UploadTensor streams carry. The
 * input is a list of records [op][len lo][len hi][len bytes]: op % 8 == 4 takes, 5 drops and 6 asks
 * whether the id (the bytes as a string) is complete; any other op appends the bytes unpacked as a
 * TensorChunk (as wk_rpc_upload.c hands them over). A shadow model of every upload checks each answer: chunks
 * only land in order and within total_bytes, the store's byte count is the sum of what is staged and never
 * passes its cap, and a taken upload holds exactly the bytes sent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_wk_common.h"
#include "worker.pb-c.h"
#include "wk_uploads.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MODEL 64

struct model {
    char id[WK_UPLOAD_ID_MAX + 1];
    uint64_t total, received;
    uint8_t *bytes;
};

static struct model g_m[MAX_MODEL];
static size_t g_n;

static struct model *find(const char *id)
{
    for (size_t i = 0; i < g_n; i++)
        if (strcmp(g_m[i].id, id) == 0) return &g_m[i];
    return NULL;
}

static void forget(struct model *m)
{
    free(m->bytes);
    *m = g_m[--g_n];
}

static uint64_t staged_bytes(void)
{
    uint64_t s = 0;
    for (size_t i = 0; i < g_n; i++) s += g_m[i].total;
    return s;
}

/* Whether the store must take this chunk: ids of 1..WK_UPLOAD_ID_MAX bytes; a new upload starts at offset
 * 0 with a total that fits the cap; later chunks continue where the last ended, within the total. */
static int should_take(const Mmgw__Worker__V1__TensorChunk *ch, const struct model *m)
{
    size_t idl = strlen(ch->upload_id);
    if (idl == 0 || idl > WK_UPLOAD_ID_MAX) return 0;
    if (!m)
        return ch->offset == 0 && ch->total_bytes > 0 && ch->total_bytes <= FZ_UPLOAD_CAP - staged_bytes() &&
               ch->data.len <= ch->total_bytes;
    return !(ch->offset == 0 && m->received > 0) && (!ch->total_bytes || ch->total_bytes == m->total) &&
           ch->offset == m->received && ch->data.len <= m->total - m->received;
}

static void append(struct wk_uploads *u, const uint8_t *p, size_t n)
{
    Mmgw__Worker__V1__TensorChunk *ch = mmgw__worker__v1__tensor_chunk__unpack(NULL, n, p);
    if (!ch) return;
    struct model *m = find(ch->upload_id);
    if (!m && g_n == MAX_MODEL) { /* the model is full: a new upload is not tried */
        mmgw__worker__v1__tensor_chunk__free_unpacked(ch, NULL);
        return;
    }
    int want = should_take(ch, m);
    uint64_t got = UINT64_MAX;
    struct mm_err err = {0};
    int32_t rc = wk_uploads_append(u, ch->upload_id, ch->total_bytes, ch->offset, ch->data.data, ch->data.len,
                                   &got, &err);
    if (rc != MM_OK) {
        /* a refused chunk changes nothing (the byte count check after each record sees a leftover) */
        if (want || rc >= 0 || err.msg[0] == '\0' || got != UINT64_MAX) abort();
    } else {
        if (!want) abort();
        if (!m) {
            m = &g_m[g_n++];
            memset(m, 0, sizeof *m);
            strcpy(m->id, ch->upload_id);
            m->total = ch->total_bytes;
            m->bytes = malloc(m->total);
            if (!m->bytes) abort();
        }
        if (ch->data.len) memcpy(m->bytes + m->received, ch->data.data, ch->data.len);
        m->received += ch->data.len;
        if (got != m->received) abort();
    }
    mmgw__worker__v1__tensor_chunk__free_unpacked(ch, NULL);
}

static void take(struct wk_uploads *u, const char *id)
{
    struct model *m = find(id);
    struct wk_upload *up = NULL;
    struct mm_err err = {0};
    int32_t rc = wk_uploads_take(u, id, &up, &err);
    if (rc != MM_OK) {
        if (up || rc != MM_NOT_FOUND || err.msg[0] == '\0') abort();
        if (m && m->received == m->total) abort(); /* a complete upload must be there to take */
        return;
    }
    if (!up || !m || m->received != m->total || wk_upload_size(up) != m->total ||
        memcmp(wk_upload_data(up), m->bytes, m->total) != 0)
        abort();
    wk_upload_free(up);
    forget(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wk_uploads *u =
        wk_uploads_create(FZ_UPLOAD_CAP, 600000); /* no input lives long enough to expire */
    if (!u) abort();
    char id[512];
    while (size >= 3) {
        uint8_t op = data[0];
        size_t n = (size_t)data[1] | (size_t)data[2] << 8;
        data += 3;
        size -= 3;
        if (n > size) n = size;
        size_t idl = n < sizeof id - 1 ? n : sizeof id - 1;
        memcpy(id, data, idl);
        id[idl] = '\0';
        switch (op % 8) {
        case 4:
            take(u, id);
            break;
        case 5: {
            struct model *m = find(id);
            wk_uploads_drop(u, id);
            if (m) forget(m);
            break;
        }
        case 6: {
            struct model *m = find(id);
            if (wk_uploads_complete(u, id) != (m && m->received == m->total)) abort();
            break;
        }
        default:
            append(u, data, n);
        }
        if (wk_uploads_bytes(u) != staged_bytes() || wk_uploads_bytes(u) > FZ_UPLOAD_CAP) abort();
        data += n;
        size -= n;
    }
    wk_uploads_destroy(u);
    while (g_n) forget(&g_m[0]);
    return 0;
}
