/* Output files written through links and special files (see mm_outfile.h). */
#include "mm_outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#define MAX_LINKS 40 /* as the kernel's limit on a path's symbolic links */

static char *join_path(const char *a, int alen, const char *b)
{
    size_t n = (size_t)alen + 1 + strlen(b) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%.*s/%s", alen, a, b);
    return s;
}

/* Whether the link cur lies in /proc (/proc/self/fd/N, also reached as /dev/fd/N): a magic link names an open
 * file, not a path. It reads "pipe:[7]", "/x (deleted)" or a file's path, and renaming over that file would
 * leave whoever holds the descriptor (a shell's `>>`, a group of commands sharing one output) on the old one.
 */
static int32_t in_procfs(const char *cur)
{
    const char *slash = strrchr(cur, '/');
    char *dir = !slash ? strdup(".") : slash == cur ? strdup("/") : join_path(cur, (int)(slash - cur), ".");
    struct statfs sf;
    int32_t yes = dir && statfs(dir, &sf) == 0 && sf.f_type == PROC_SUPER_MAGIC;
    free(dir);
    return yes;
}

/* The file that path's chain of symbolic links ends at (path itself when it is none), or NULL with *direct 1
 * when the chain passes one of /proc's magic links. */
static int32_t follow_links(const char *path, char **out, int32_t *direct, struct mm_err *err)
{
    *out = NULL;
    *direct = 0;
    char *cur = strdup(path);
    if (!cur) return mm_err_set(err, MM_NOMEM, "out of memory");
    for (int32_t hops = 0;; hops++) {
        struct stat ls;
        if (lstat(cur, &ls) != 0) {
            if (errno == ENOENT) break; /* a new file, or where a dangling link points */
            int e = errno;
            free(cur);
            return mm_err_set(err, MM_IO, "%s: %s", path, strerror(e));
        }
        if (!S_ISLNK(ls.st_mode)) break;
        if (in_procfs(cur)) {
            free(cur);
            *direct = 1;
            return MM_OK;
        }
        char buf[PATH_MAX];
        ssize_t n = hops < MAX_LINKS ? readlink(cur, buf, sizeof buf - 1) : -1;
        if (n < 0) {
            int e = hops < MAX_LINKS ? errno : ELOOP;
            free(cur);
            return mm_err_set(err, MM_IO, "%s: %s", path, strerror(e));
        }
        buf[n] = '\0';
        /* a relative target is relative to the link's own folder */
        const char *slash = strrchr(cur, '/');
        char *next = buf[0] == '/' || !slash ? strdup(buf) : join_path(cur, (int)(slash - cur), buf);
        if (!next) {
            free(cur);
            return mm_err_set(err, MM_NOMEM, "out of memory");
        }
        free(cur);
        cur = next;
    }
    *out = cur;
    return MM_OK;
}

static int32_t open_direct(struct mm_outfile *o, const char *path, struct mm_err *err)
{
    o->path = strdup(path);
    if (!o->path) return mm_err_set(err, MM_NOMEM, "out of memory");
    o->f = fopen(path, "wb");
    if (!o->f) {
        int e = errno;
        free(o->path);
        o->path = NULL;
        return mm_err_set(err, MM_IO, "%s: cannot open: %s", path, strerror(e));
    }
    return MM_OK;
}

/* A temporary file beside o->path that nobody else has: created with O_EXCL under a name of this process */
static int32_t open_temp(struct mm_outfile *o, const char *shown, struct mm_err *err)
{
    static unsigned counter;
    size_t n = strlen(o->path) + 48;
    o->tmp = malloc(n);
    if (!o->tmp) return mm_err_set(err, MM_NOMEM, "out of memory");
    struct stat st;
    int32_t replace = stat(o->path, &st) == 0;
    int fd = -1;
    for (int32_t tries = 0; fd < 0 && tries < 100; tries++) {
        unsigned k = __atomic_add_fetch(&counter, 1u, __ATOMIC_RELAXED);
        snprintf(o->tmp, n, "%s.tmp.%ld.%u", o->path, (long)getpid(), k);
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        int e = errno;
        free(o->tmp);
        o->tmp = NULL;
        return mm_err_set(err, MM_IO, "%s: cannot create: %s", shown, strerror(e));
    }
    if (replace) (void)fchmod(fd, st.st_mode & 07777); /* the replaced file's permissions stay */
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        int e = errno;
        close(fd);
        unlink(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
        return mm_err_set(err, MM_IO, "%s: %s", shown, strerror(e));
    }
    return MM_OK;
}

int32_t mm_outfile_open(struct mm_outfile *o, const char *path, struct mm_err *err)
{
    memset(o, 0, sizeof *o);
    struct stat st;
    /* an existing non-regular file, links followed (a device, a FIFO; a directory fails to open) */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return open_direct(o, path, err);
    char *target = NULL;
    int32_t direct = 0;
    int32_t rc = follow_links(path, &target, &direct, err);
    if (rc != MM_OK) return rc;
    if (direct) return open_direct(o, path, err);
    o->path = target;
    rc = open_temp(o, path, err);
    if (rc != MM_OK) {
        free(o->path);
        o->path = NULL;
    }
    return rc;
}

int32_t mm_outfile_close(struct mm_outfile *o, int32_t ok, struct mm_err *err)
{
    int e = ok ? 0 : errno;
    if (o->f) {
        if (ok && (fflush(o->f) != 0 || ferror(o->f))) {
            ok = 0;
            e = errno;
        }
        if (fclose(o->f) != 0 && ok) {
            ok = 0;
            e = errno;
        }
        o->f = NULL;
    }
    if (ok && o->tmp && rename(o->tmp, o->path) != 0) {
        ok = 0;
        e = errno;
    }
    int32_t rc = MM_OK;
    if (!ok) {
        if (o->tmp) unlink(o->tmp);
        rc = mm_err_set(err, MM_IO, "%s: write failed: %s", o->path ? o->path : "(output)",
                        strerror(e ? e : EIO));
    }
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
    return rc;
}
