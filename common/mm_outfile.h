/* An output file written where a command line's path says, the way its user expects (mmgw-preprocess --out,
 * the safetensors writer of mmgw-mkdemo, mmgw-quantize and mmgw-run, mmgw-worker --port-file):
 *
 * - a path that does not exist, or a regular file: written to a temporary file beside it, then renamed over
 *   it, so nobody sees half a file and a failed write leaves the old one as it was (a replaced file keeps
 *   its permission bits; a new one gets 0666 less the umask, as fopen would give it);
 * - a symbolic link, or a chain of them: the same at the file the chain ends at (which may not exist yet);
 *   the links stay links;
 * - anything else that exists (a device such as /dev/null or a terminal, a FIFO, /dev/stdout to a pipe) and
 *   the magic links of /proc (/dev/stdout -> /proc/self/fd/1, which names an open file, not a path): opened
 *   and written directly, since a rename would put a regular file in its place. */
#ifndef MM_OUTFILE_H
#define MM_OUTFILE_H

#include <stdint.h>
#include <stdio.h>

#include "mm_status.h"

struct mm_outfile {
    FILE *f;    /* write here between open and close */
    char *path; /* where the bytes land: the path, or the file its symbolic links end at */
    char *tmp;  /* the temporary file renamed onto path at close; NULL when written directly */
};

/** Open path for writing as above. On error nothing is left open or created and err names the path. */
int32_t mm_outfile_open(struct mm_outfile *o, const char *path, struct mm_err *err);

/** Finish. ok nonzero (every write succeeded): flush, close and rename the temporary file into place; MM_OK,
 * or MM_IO when the flush, close or rename fails. ok zero: MM_IO "write failed" with errno's reason (call it
 * right after the failed write). On every failure the temporary file is removed (a direct write cannot be
 * taken back). *o is released in every case. */
int32_t mm_outfile_close(struct mm_outfile *o, int32_t ok, struct mm_err *err);

#endif
