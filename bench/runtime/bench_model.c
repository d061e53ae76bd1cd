#include "bench_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "mkdemo.h"

int32_t bench_model_pick(struct bench_model *bm, const char *given, struct mm_err *err)
{
    bm->tmpdir[0] = '\0';
    bm->dir = given;
    if (bm->dir) return MM_OK;
    const char *td = getenv("MMGW_TESTDATA");
    snprintf(bm->gold, sizeof bm->gold, "%s/m3-tiny-a", td ? td : "../shared/testdata");
    struct stat st;
    if (stat(bm->gold, &st) == 0) {
        bm->dir = bm->gold;
        return MM_OK;
    }
    snprintf(bm->tmpdir, sizeof bm->tmpdir, "/tmp/mmgw_bench_XXXXXX");
    if (!mkdtemp(bm->tmpdir)) {
        bm->tmpdir[0] = '\0';
        return mm_err_set(err, MM_IO, "mkdtemp failed");
    }
    struct mk_demo_opts o;
    mk_demo_defaults(&o);
    int32_t rc = mk_demo_write(bm->tmpdir, &o, err);
    if (rc) return rc;
    bm->dir = bm->tmpdir;
    return MM_OK;
}

void bench_model_release(struct bench_model *bm)
{
    if (!bm->tmpdir[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", bm->tmpdir);
    if (system(cmd)) fprintf(stderr, "cleanup failed\n");
    bm->tmpdir[0] = '\0';
}
