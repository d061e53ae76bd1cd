/* gw_media_submit: the pool-side half of asynchronous preprocessing (see gw_media_job.h). */
#include "gw_media_job.h"

static void job_complete(void *arg)
{
    struct gw_media_job *job = arg;
    job->done(job, job->arg);
}

static void job_run(void *arg)
{
    struct gw_media_job *job = arg;
    mm_err_clear(&job->err);
    job->rc = gw_media_process(&job->input, job->vt, job->inst, &job->opt, &job->result, &job->err);
    if (!job->ex) {
        job->done(job, job->arg);
        return;
    }
    if (gw_executor_post(job->ex, job_complete, job) != 0) {
        gw_media_result_free(&job->result);
        job->rc = mm_err_set(&job->err, MM_CANCELLED, "%s: the requesting loop is shutting down",
                             job->input.label ? job->input.label : "media");
        job->done(job, job->arg);
    }
}

int32_t gw_media_submit(struct gw_pool *pool, struct gw_media_job *job)
{
    return gw_pool_submit(pool, job_run, job);
}
