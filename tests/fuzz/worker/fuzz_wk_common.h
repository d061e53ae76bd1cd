/* What the worker fuzz targets and their seed maker share: the limits a demo-sized worker runs with and
 * the fixtures a request may name (a staged upload, a shared-memory object). */
#ifndef FUZZ_WK_COMMON_H
#define FUZZ_WK_COMMON_H

/* the demo checkpoint's ids (tools/mkdemo), M3's 2x2 merge, any row length (as mmgw-worker runs) */
#define FZ_VOCAB 8199
#define FZ_IMAGE_TOKEN 8195
#define FZ_VIDEO_TOKEN 8196
#define FZ_MAX_CONTEXT 1024 /* a small cache: short enough that a fuzzed prompt can pass it */
#define FZ_MERGE 4
#define FZ_UPLOAD_CAP                                                                                        \
    (1u << 20) /* the store's cap: small, so that a huge total_bytes is refused, not malloc'd */

/* staged before every input: a complete upload of FZ_UPLOAD_BYTES (4 rows x 6 F32: a 1x2x2 image) and one
 * still missing its second half */
#define FZ_UPLOAD_ID "up-img"
#define FZ_UPLOAD_PART_ID "up-part"
#define FZ_ROW 6
#define FZ_UPLOAD_BYTES (4 * FZ_ROW * 4)
/* a shared-memory object of FZ_SHM_BYTES bytes the fuzzer creates (and unlinks at exit) */
#define FZ_SHM_NAME "/mmgw-fuzz-wk"
#define FZ_SHM_BYTES 4096
/* its first 16 bytes, the key a request must name (SharedMemoryRef.key) */
#define FZ_SHM_KEY "fuzz-wk-shm-key!"

#endif
