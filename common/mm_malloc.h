/* Process-wide malloc settings for the long-running servers (mmgw, mmgw-worker). */
#ifndef MM_MALLOC_H
#define MM_MALLOC_H

/** Keep freed large blocks (media tensors, packed requests: a few MiB per image) in the heap for reuse
 * instead of returning them to the kernel on every free: glibc otherwise maps each block of 128 KiB or
 * more fresh and takes a page fault per 4 KiB written into it. Call once at the start of main. The
 * environment (MALLOC_MMAP_THRESHOLD_, GLIBC_TUNABLES) still wins where it sets these. */
void mm_malloc_tune_server(void);

#endif
