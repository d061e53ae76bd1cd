/* `file:` URLs (RFC 8089) in image_url / video_url parts, read from the gateway's own disk beneath one
 * folder the operator names (`allowed_local_media_path`, vLLM's `--allowed-local-media-path`); without it
 * they are refused.
 *
 *   file:///abs/path   file://localhost/abs/path   file:/abs/path
 *
 * The path is percent-decoded; another host, a relative path, a query or a fragment is refused. The file
 * is opened with openat2(RESOLVE_BENEATH) from the folder, so neither ".." nor a symbolic link leads out of
 * it, and only a regular file is read (a FIFO or a device would block a thread or never end). */
#ifndef GW_API_FILEURL_H
#define GW_API_FILEURL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

/** Whether url starts with "file:" (any case). */
int gw_api_is_file_url(const char *url, size_t len);

/** The absolute path a file: URL names, percent-decoded, as a malloc'ed string (*path). MM_INVALID with a
 * message that says why; MM_NOMEM. */
int32_t gw_api_file_url_path(const char *url, size_t len, char **path, struct mm_err *err);

/** Where path lies inside folder (an absolute path; trailing '/'s ignored): a pointer into path
 * past the folder and its '/', or NULL when path does not start with the folder. Lexical only. */
const char *gw_api_file_beneath(const char *folder, const char *path);

/** Read the file at path (absolute), which must lie beneath root (the folder's real path) or alias (the
 * same folder as configured, may be NULL) and resolve beneath root. At most max_bytes; *data is
 * malloc'ed. MM_DENIED (outside the folder, or permission), MM_NOT_FOUND, MM_INVALID (not a regular
 * file), MM_TOO_LARGE, MM_IO, MM_NOMEM, each with a message. */
int32_t gw_api_file_read(const char *root, const char *alias, const char *path, uint64_t max_bytes,
                         uint8_t **data, size_t *len, struct mm_err *err);

#endif
