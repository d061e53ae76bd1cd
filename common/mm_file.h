/* Reading a whole file that a caller has opened (a media file from the command line, or beneath a gateway's
 * allowed_local_media_path): regular files only, so a FIFO or a device cannot block a thread or stream
 * without end, and a size cap checked before anything is allocated. */
#ifndef MM_FILE_H
#define MM_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

/** Read all of fd (not closed here) into a new buffer (*data, free()) of *len bytes. label names the file
 * in messages. MM_INVALID when fd is not a regular file, MM_TOO_LARGE past max_bytes, MM_IO on a read
 * error or a file that shrank while read, MM_NOMEM. */
int32_t mm_file_read_fd(int fd, const char *label, uint64_t max_bytes, uint8_t **data, size_t *len,
                        struct mm_err *err);

/** Open path (without waiting on a FIFO) and read it as mm_file_read_fd does, into a NUL-terminated buffer
 * (*text, free(); *len bytes before the NUL). Messages name the path; MM_IO when it cannot be opened. */
int32_t mm_file_read_text(const char *path, uint64_t max_bytes, char **text, size_t *len, struct mm_err *err);

#endif
