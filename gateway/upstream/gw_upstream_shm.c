/* Pooled shared-memory tensor objects (see gw_upstream_shm.h). */
#include "gw_upstream_shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "mm_log.h"

/* Room for a burst of images in flight (a 640x480 image is 3.2 MB of bf16 patches), but never more than an
 * eighth of /dev/shm: a container's is 64 MiB by default, and others on the host (NCCL, data loaders) need
 * it too. */
#define POOL_MAX_BYTES (64u << 20)
#define POOL_SHARE_OF_DEVSHM 8
/* Objects hold whole MiB (after the key's page), so that one serves tensors of nearby sizes. */
#define SIZE_STEP (1u << 20)

struct gw_shm_tensor {
    char name[GW_SHM_NAME_MAX];
    uint8_t key[GW_SHM_KEY_BYTES];
    uint8_t *map; /* cap bytes, read-write: the key, then the tensor at GW_SHM_DATA_OFFSET */
    size_t cap;
    struct gw_shm_tensor *next;
};

/* "/mmgw-<pid>-<16 hex>-" with its NUL: "/mmgw-" 6, a pid 10, dashes 2, token 16 */
#define PREFIX_MAX 40

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gw_shm_tensor *pool;
static size_t pool_objects, pool_bytes;
static int started; /* under pool_mu: the lock object is held, stale objects swept, atexit registered */
static size_t pool_max = POOL_MAX_BYTES; /* set by start_once */
static int lock_fd = -1;
static pid_t owner_pid;                 /* the process that made the objects (atexit in a fork's child) */
static char prefix[PREFIX_MAX];         /* "/mmgw-<pid>-<16 hex>-", set by start_once */
static char lock_name[GW_SHM_NAME_MAX]; /* prefix + "lock", while lock_fd is held */
static atomic_uint_fast64_t counter;

#define TOKEN_HEX 16

/* name (a /dev/shm entry) is exactly "mmgw-<decimal>-<16 lowercase hex>-lock": the length of its prefix
 * (through the dash before "lock"), else 0. Strict, so that no other name maps onto a live process's
 * objects ("mmgw-07-lock" once stood for process 7's). */
static size_t lock_prefix_len(const char *name)
{
    if (strncmp(name, "mmgw-", 5) != 0) return 0;
    size_t i = 5, d = 0;
    while (name[i] >= '0' && name[i] <= '9' && d < 10) i++, d++;
    if (d == 0 || name[5] == '0' || name[i] != '-') return 0;
    i++;
    for (size_t h = 0; h < TOKEN_HEX; h++, i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return 0;
    if (strcmp(name + i, "-lock") != 0) return 0;
    return i + 1;
}

/* Remove the objects of processes that died with objects out: their lock object, a regular file of our user,
 * can be locked. Each one stays locked while its objects and then itself are unlinked; a process never
 * reuses another's prefix (a random token follows the pid), so PID reuse cannot make us remove a live
 * process's objects. */
static void sweep_stale(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *de;
    struct {
        int fd;
        char prefix[PREFIX_MAX];
    } dead[64];
    size_t n_dead = 0;
    while ((de = readdir(d)) != NULL && n_dead < sizeof dead / sizeof dead[0]) {
        size_t pl = lock_prefix_len(de->d_name);
        if (pl == 0 || pl >= PREFIX_MAX || strcmp(de->d_name, lock_name + 1) == 0) continue;
        char name[NAME_MAX + 2];
        snprintf(name, sizeof name, "/%s", de->d_name);
        int fd = shm_open(name, O_RDWR | O_NONBLOCK, 0);
        if (fd < 0) continue;
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
            flock(fd, LOCK_EX | LOCK_NB) != 0) { /* not a lock of ours, or its owner is alive */
            close(fd);
            continue;
        }
        dead[n_dead].fd = fd;
        memcpy(dead[n_dead].prefix, de->d_name, pl);
        dead[n_dead].prefix[pl] = '\0';
        n_dead++;
    }
    for (size_t i = 0; i < n_dead; i++) {
        const size_t pl = strlen(dead[i].prefix);
        rewinddir(d);
        size_t removed = 0;
        while ((de = readdir(d)) != NULL) {
            if (strncmp(de->d_name, dead[i].prefix, pl) != 0 || strcmp(de->d_name + pl, "lock") == 0)
                continue;
            char name[NAME_MAX + 2];
            snprintf(name, sizeof name, "/%s", de->d_name);
            removed += shm_unlink(name) == 0;
        }
        char name[PREFIX_MAX + 8];
        snprintf(name, sizeof name, "/%slock", dead[i].prefix);
        shm_unlink(name); /* last, still locked */
        close(dead[i].fd);
        if (removed)
            mm_log_info("upstream", "removed %zu shared-memory objects left by %.*s", removed, (int)(pl - 1),
                        dead[i].prefix);
    }
    closedir(d);
}

static void at_exit_drain(void)
{
    if (getpid() != owner_pid) return; /* a forked child: the objects are its parent's */
    gw_shm_pool_drain();
    if (lock_fd >= 0) shm_unlink(lock_name);
}

/* A new prefix "/mmgw-<pid>-<16 random hex>-" and its lock object, created (O_EXCL, 0600) and locked. A
 * sweeper that finds the lock between our create and our flock takes us for dead and unlinks it: then try
 * another token. */
static void take_lock(void)
{
    for (int attempt = 0; attempt < 4; attempt++) {
        uint64_t tok;
        if (getrandom(&tok, sizeof tok, 0) != (ssize_t)sizeof tok) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            tok = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40);
        }
        snprintf(prefix, sizeof prefix, "/mmgw-%ld-%016llx-", (long)getpid(), (unsigned long long)tok);
        snprintf(lock_name, sizeof lock_name, "%slock", prefix);
        int fd = shm_open(lock_name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) {
            if (errno == EEXIST) continue;
            return; /* no /dev/shm: objects fail too */
        }
        struct stat st;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 && st.st_nlink > 0) {
            lock_fd = fd; /* held until the process ends */
            return;
        }
        close(fd);
        shm_unlink(lock_name);
    }
}

/* First use in this process (pool_mu held): hold our lock object, then sweep. */
static void start_once(void)
{
    if (started) return;
    started = 1;
    owner_pid = getpid();
    take_lock();
    sweep_stale();
    struct statvfs vfs;
    if (statvfs("/dev/shm", &vfs) == 0 && vfs.f_blocks > 0) {
        const uint64_t share = (uint64_t)vfs.f_blocks * vfs.f_frsize / POOL_SHARE_OF_DEVSHM;
        if (share < pool_max) pool_max = (size_t)share;
    }
    atexit(at_exit_drain);
}

static void destroy(struct gw_shm_tensor *t)
{
    munmap(t->map, t->cap);
    shm_unlink(t->name);
    free(t);
}

static int32_t make_object(size_t cap, struct gw_shm_tensor **out, struct mm_err *err)
{
    struct gw_shm_tensor *t = calloc(1, sizeof *t);
    if (!t) return mm_err_set(err, MM_NOMEM, "out of memory for a shared-memory object");
    snprintf(t->name, sizeof t->name, "%s%llu", prefix, (unsigned long long)atomic_fetch_add(&counter, 1));
    int fd = shm_open(t->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        int32_t rc = mm_err_set(err, MM_IO, "shm_open %s: %s", t->name, strerror(errno));
        free(t);
        return rc;
    }
    /* Allocated, not just sized: a full /dev/shm (64 MiB in a default container) is then this error
     * instead of a SIGBUS in the copy. */
    int32_t rc = MM_OK;
    int fe = posix_fallocate(fd, 0, (off_t)cap);
    if (fe != 0) {
        rc = mm_err_set(err, fe == ENOSPC ? MM_TOO_LARGE : MM_IO, "allocating %zu bytes for %s: %s", cap,
                        t->name, strerror(fe));
    } else {
        void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            rc = mm_err_set(err, MM_IO, "mmap %s: %s", t->name, strerror(errno));
        else
            t->map = p;
    }
    close(fd);
    if (rc != MM_OK) {
        shm_unlink(t->name);
        free(t);
        return rc;
    }
    t->cap = cap;
    *out = t;
    return MM_OK;
}

int32_t gw_shm_tensor_create(const void *data, size_t len, struct gw_shm_tensor **out, struct mm_err *err)
{
    *out = NULL;
    if (len == 0) return mm_err_set(err, MM_INVALID, "a shared-memory tensor needs at least one byte");
    if (len > SIZE_MAX - SIZE_STEP - GW_SHM_DATA_OFFSET)
        return mm_err_set(err, MM_TOO_LARGE, "tensor of %zu bytes", len);
    const size_t need = GW_SHM_DATA_OFFSET + len;
    const size_t cap = (len + SIZE_STEP - 1) / SIZE_STEP * SIZE_STEP + GW_SHM_DATA_OFFSET;
    uint8_t key[GW_SHM_KEY_BYTES];
    if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key)
        return mm_err_set(err, MM_IO, "getrandom for a shared-memory key: %s", strerror(errno));
    struct gw_shm_tensor *t = NULL;
    pthread_mutex_lock(&pool_mu);
    start_once();
    /* the smallest pooled object that fits and is not much larger (a big one would sit under small
     * tensors while big ones get new objects) */
    struct gw_shm_tensor **best = NULL;
    for (struct gw_shm_tensor **p = &pool; *p; p = &(*p)->next)
        if ((*p)->cap >= need && (*p)->cap <= 2 * cap && (!best || (*p)->cap < (*best)->cap)) best = p;
    if (best) {
        t = *best;
        *best = t->next;
        t->next = NULL;
        pool_objects--;
        pool_bytes -= t->cap;
    }
    pthread_mutex_unlock(&pool_mu);
    if (!t) {
        int32_t rc = make_object(cap, &t, err);
        if (rc != MM_OK) return rc;
    }
    memcpy(t->key, key, sizeof key);
    memcpy(t->map, key, sizeof key);
    memcpy(t->map + GW_SHM_DATA_OFFSET, data, len);
    *out = t;
    return MM_OK;
}

const char *gw_shm_tensor_name(const struct gw_shm_tensor *t)
{
    return t->name;
}

const uint8_t *gw_shm_tensor_key(const struct gw_shm_tensor *t)
{
    return t->key;
}

void gw_shm_tensor_release(struct gw_shm_tensor *t, int reuse)
{
    if (!t) return;
    if (reuse) {
        pthread_mutex_lock(&pool_mu);
        if (pool_bytes + t->cap <= pool_max) {
            t->next = pool;
            pool = t;
            pool_objects++;
            pool_bytes += t->cap;
            t = NULL;
        }
        pthread_mutex_unlock(&pool_mu);
    }
    if (t) destroy(t);
}

void gw_shm_pool_drain(void)
{
    pthread_mutex_lock(&pool_mu);
    struct gw_shm_tensor *t = pool;
    pool = NULL;
    pool_objects = 0;
    pool_bytes = 0;
    pthread_mutex_unlock(&pool_mu);
    while (t) {
        struct gw_shm_tensor *next = t->next;
        destroy(t);
        t = next;
    }
}

void gw_shm_pool_stats(size_t *objects, size_t *bytes)
{
    pthread_mutex_lock(&pool_mu);
    if (objects) *objects = pool_objects;
    if (bytes) *bytes = pool_bytes;
    pthread_mutex_unlock(&pool_mu);
}
