/* `data:` URLs (RFC 2397) in image_url / video_url parts: decoded locally, never fetched.
 *
 *   data:[<mediatype>][;param=value...][;base64],<data>
 *
 * Base64 payloads accept the standard and the URL-safe alphabet, missing padding and embedded
 * whitespace (clients wrap long lines); other payloads are percent-decoded. The decoded size is capped
 * while decoding, so an oversized payload is refused before its bytes are held twice. */
#ifndef GW_API_DATAURL_H
#define GW_API_DATAURL_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

struct gw_api_dataurl {
    char mediatype[128]; /* lower-case "image/png"; "" when absent */
    uint8_t *data;       /* malloc'ed decoded bytes (free() them) */
    size_t len;
};

/** Whether url starts with "data:" (any case). */
int gw_api_is_data_url(const char *url, size_t len);

/** Decode a data: URL. max_bytes caps the decoded size (0 = no cap). Returns MM_OK, MM_INVALID
 * (malformed: the message says where) or MM_TOO_LARGE, MM_NOMEM. On error out->data is NULL. */
int32_t gw_api_dataurl_decode(const char *url, size_t len, uint64_t max_bytes, struct gw_api_dataurl *out,
                              struct mm_err *err);

#endif
