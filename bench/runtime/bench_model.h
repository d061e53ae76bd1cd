/* The checkpoint a runtime benchmark loads: the one given, else the tiny golden checkpoint
 * ($MMGW_TESTDATA/m3-tiny-a or ../shared/testdata/m3-tiny-a), else a demo checkpoint generated into a
 * temporary folder that bench_model_release removes. */
#ifndef BENCH_MODEL_H
#define BENCH_MODEL_H

#include <stdint.h>

#include "mm_status.h"

struct bench_model {
    const char *dir; /* what to load */
    char tmpdir[64]; /* the generated checkpoint's folder, or "" */
    char gold[4096];
};

int32_t bench_model_pick(struct bench_model *bm, const char *given, struct mm_err *err);
void bench_model_release(struct bench_model *bm);

#endif
