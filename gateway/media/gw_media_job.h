/* Asynchronous preprocessing for the gateway: run gw_media_process on a gw_pool thread and deliver the
 * outcome on the requesting event loop through its gw_executor (gateway/core/gw_executor.h).
 *
 *   job->input/vt/inst/opt = ...; job->ex = loop executor; job->done = on_done; job->arg = req;
 *   if (gw_media_submit(pool, job) != MM_OK) -> answer 503 (the job was not queued; nothing will run)
 *   ...later, on the loop thread: on_done(job, req): job->rc, job->result (owned by the job's owner: call
 *   gw_media_result_free), job->err.
 *
 * The job struct and the input bytes belong to the caller and must stay valid until done runs. If the
 * executor refuses the completion (it is shutting down), done runs on the pool thread with rc =
 * MM_CANCELLED and the result already freed, so the caller can release its memory. */
#ifndef GW_MEDIA_JOB_H
#define GW_MEDIA_JOB_H

#include "gw_executor.h"
#include "gw_media.h"
#include "gw_pool.h"

struct gw_media_job {
    /* in */
    struct gw_media_input input;
    const struct mmgw_plugin *vt;
    const struct mmgw_plugin_instance *inst;
    struct gw_media_options opt;
    const struct gw_executor *ex; /* NULL = run done on the pool thread */
    void (*done)(struct gw_media_job *job, void *arg);
    void *arg;
    /* out */
    int32_t rc;
    struct gw_media_result result;
    struct mm_err err;
};

/** Queue the job. MM_OK, or MM_EXHAUSTED / MM_CANCELLED from the pool (done will not run). */
int32_t gw_media_submit(struct gw_pool *pool, struct gw_media_job *job);

#endif
