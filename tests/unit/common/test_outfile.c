/* mm_outfile: regular files replaced atomically (mode kept), symbolic links written at their target (the
 * links stay), FIFOs and /proc's magic links written through, failures leave nothing behind; and the
 * safetensors writer (mmgw-mkdemo, mmgw-quantize, mmgw-run) goes through it. Everything in a fresh folder
 * under /tmp; no device is touched. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mm_dtype.h"
#include "mm_outfile.h"
#include "mm_safetensors.h"
#include "mmgw_test.h"

static char g_dir[64];

static const char *at(const char *name)
{
    static char buf[8][256];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", g_dir, name);
    return b;
}

static int32_t write_text(const char *path, const char *text, struct mm_err *e)
{
    struct mm_outfile o;
    int32_t rc = mm_outfile_open(&o, path, e);
    if (rc != MM_OK) return rc;
    return mm_outfile_close(&o, fputs(text, o.f) >= 0, e);
}

static int read_text(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return (int)n;
}

static int is_link(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* files in g_dir whose name starts with prefix (left-over temporaries) */
static int count_prefixed(const char *prefix)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '^%s' || true", g_dir, prefix);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

static void test_regular(void)
{
    struct mm_err e = {0};
    char buf[64];
    mode_t old = umask(022);
    CHECK_EQ_INT(write_text(at("new.txt"), "one", &e), MM_OK);
    umask(old);
    struct stat st;
    CHECK(stat(at("new.txt"), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0644);
    CHECK(read_text(at("new.txt"), buf, sizeof buf) == 3 && strcmp(buf, "one") == 0);
    /* replaced by a new file (atomic rename), the permissions kept */
    CHECK(chmod(at("new.txt"), 0640) == 0);
    struct stat before;
    CHECK(stat(at("new.txt"), &before) == 0);
    CHECK_EQ_INT(write_text(at("new.txt"), "two!", &e), MM_OK);
    CHECK(stat(at("new.txt"), &st) == 0 && (st.st_mode & 0777) == 0640);
    CHECK(st.st_ino != before.st_ino);
    CHECK(read_text(at("new.txt"), buf, sizeof buf) == 4 && strcmp(buf, "two!") == 0);
    /* a failed write leaves the old file and no temporary */
    struct mm_outfile o;
    CHECK_EQ_INT(mm_outfile_open(&o, at("new.txt"), &e), MM_OK);
    fputs("half", o.f);
    errno = ENOSPC;
    CHECK_EQ_INT(mm_outfile_close(&o, 0, &e), MM_IO);
    CHECK(strstr(e.msg, "new.txt") && strstr(e.msg, strerror(ENOSPC)));
    CHECK(read_text(at("new.txt"), buf, sizeof buf) == 4 && strcmp(buf, "two!") == 0);
    CHECK_EQ_INT(count_prefixed("new.txt.tmp"), 0);
    /* a folder that does not exist: an error naming the path, nothing created */
    CHECK_EQ_INT(write_text(at("nowhere/x.txt"), "x", &e), MM_IO);
    CHECK(strstr(e.msg, "nowhere/x.txt") != NULL);
}

static void test_links(void)
{
    struct mm_err e = {0};
    char buf[64];
    /* a relative link into a subfolder: the target is rewritten, the link stays */
    CHECK(mkdir(at("sub"), 0755) == 0);
    CHECK_EQ_INT(write_text(at("sub/target.txt"), "old", &e), MM_OK);
    CHECK(symlink("sub/target.txt", at("link.txt")) == 0);
    CHECK_EQ_INT(write_text(at("link.txt"), "via link", &e), MM_OK);
    CHECK(is_link(at("link.txt")));
    CHECK(read_text(at("sub/target.txt"), buf, sizeof buf) == 8 && strcmp(buf, "via link") == 0);
    CHECK_EQ_INT(count_prefixed("link.txt.tmp"), 0);
    /* a chain of two links, the second absolute */
    CHECK(symlink(at("sub/target.txt"), at("sub/abs.txt")) == 0);
    CHECK(symlink("sub/abs.txt", at("chain.txt")) == 0);
    CHECK_EQ_INT(write_text(at("chain.txt"), "chained", &e), MM_OK);
    CHECK(is_link(at("chain.txt")) && is_link(at("sub/abs.txt")));
    CHECK(read_text(at("sub/target.txt"), buf, sizeof buf) == 7 && strcmp(buf, "chained") == 0);
    /* a dangling link: its target is created */
    CHECK(symlink("sub/later.txt", at("dangling.txt")) == 0);
    CHECK_EQ_INT(write_text(at("dangling.txt"), "made", &e), MM_OK);
    CHECK(is_link(at("dangling.txt")));
    CHECK(read_text(at("sub/later.txt"), buf, sizeof buf) == 4 && strcmp(buf, "made") == 0);
    /* a loop: an error, not a hang */
    CHECK(symlink("loop_b", at("loop_a")) == 0 && symlink("loop_a", at("loop_b")) == 0);
    CHECK_EQ_INT(write_text(at("loop_a"), "x", &e), MM_IO);
    CHECK(is_link(at("loop_a")));
    /* the safetensors writer goes through the same code */
    struct mm_st_writer *w = mm_st_writer_create();
    float v[2] = {1.5f, -2.0f};
    CHECK(mm_st_writer_add(w, "v", MM_DT_F32, 1, (int64_t[]){2}, v, sizeof v, &e) == MM_OK);
    CHECK(symlink("sub/model.safetensors", at("model.safetensors")) == 0);
    CHECK_EQ_INT(mm_st_writer_save(w, at("model.safetensors"), &e), MM_OK);
    mm_st_writer_destroy(w);
    CHECK(is_link(at("model.safetensors")));
    struct mm_st_file *f = NULL;
    CHECK_EQ_INT(mm_st_open(at("sub/model.safetensors"), &f, &e), MM_OK);
    CHECK(f && mm_st_count(f) == 1);
    mm_st_close(f);
}

static void test_fifo(void)
{
    struct mm_err e = {0};
    CHECK(mkfifo(at("pipe"), 0600) == 0);
    /* a reader first (a writer's open blocks until there is one); the write fits the pipe's buffer */
    int rfd = open(at("pipe"), O_RDONLY | O_NONBLOCK);
    CHECK(rfd >= 0);
    CHECK_EQ_INT(write_text(at("pipe"), "through the fifo", &e), MM_OK);
    struct stat st;
    CHECK(lstat(at("pipe"), &st) == 0 && S_ISFIFO(st.st_mode)); /* still a FIFO */
    char buf[64] = {0};
    ssize_t n = rfd >= 0 ? read(rfd, buf, sizeof buf - 1) : -1;
    CHECK(n == 16 && memcmp(buf, "through the fifo", 16) == 0);
    if (rfd >= 0) close(rfd);
    /* a link to a FIFO: the same */
    CHECK(symlink("pipe", at("pipe_link")) == 0);
    rfd = open(at("pipe"), O_RDONLY | O_NONBLOCK);
    CHECK_EQ_INT(write_text(at("pipe_link"), "again", &e), MM_OK);
    CHECK(is_link(at("pipe_link")) && lstat(at("pipe"), &st) == 0 && S_ISFIFO(st.st_mode));
    memset(buf, 0, sizeof buf);
    n = rfd >= 0 ? read(rfd, buf, sizeof buf - 1) : -1;
    CHECK(n == 5 && memcmp(buf, "again", 5) == 0);
    if (rfd >= 0) close(rfd);
    /* the safetensors writer into a FIFO */
    struct mm_st_writer *w = mm_st_writer_create();
    int32_t v = 7;
    CHECK(mm_st_writer_add(w, "v", MM_DT_I32, 1, (int64_t[]){1}, &v, sizeof v, &e) == MM_OK);
    rfd = open(at("pipe"), O_RDONLY | O_NONBLOCK);
    CHECK_EQ_INT(mm_st_writer_save(w, at("pipe"), &e), MM_OK);
    mm_st_writer_destroy(w);
    CHECK(lstat(at("pipe"), &st) == 0 && S_ISFIFO(st.st_mode));
    static uint8_t st_bytes[4096];
    n = rfd >= 0 ? read(rfd, st_bytes, sizeof st_bytes) : -1;
    struct mm_st_file *f = NULL;
    CHECK(n > 8 && mm_st_parse(st_bytes, (size_t)n, "fifo", &f, &e) == MM_OK && mm_st_count(f) == 1);
    mm_st_close(f);
    if (rfd >= 0) close(rfd);
}

/* /proc/self/fd/N names the open file (as /dev/stdout does when the output is redirected): written through
 * that file, not renamed over it (nor over the file the link reads as) */
static void test_proc_fd(void)
{
    struct mm_err e = {0};
    int fd = open(at("redirect.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    struct stat before, after;
    CHECK(fstat(fd, &before) == 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    CHECK_EQ_INT(write_text(path, "redirected", &e), MM_OK);
    CHECK(stat(at("redirect.txt"), &after) == 0 && after.st_ino == before.st_ino);
    char buf[64];
    CHECK(read_text(at("redirect.txt"), buf, sizeof buf) == 10 && strcmp(buf, "redirected") == 0);
    CHECK_EQ_INT(count_prefixed("redirect.txt.tmp"), 0);
    close(fd);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/mmgw_outfile_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_regular();
    test_links();
    test_fifo();
    test_proc_fd();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return test_done();
}
