/* The API's metric families. Registration is idempotent, so every generation calls this again. */
#include "gw_api_internal.h"

/* preprocessing stages are short: 0.1 ms .. 30 s */
static const double stage_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                       0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};

int32_t gw_api_metrics_init(struct gw_metrics *reg, struct gw_api_metrics *m, struct mm_err *err)
{
    static const char *const l_mes[] = {"model", "endpoint", "status"};
    static const char *const l_me[] = {"model", "endpoint"};
    static const char *const l_stage[] = {"stage"};
    static const char *const l_mk[] = {"model", "kind"};
    static const char *const l_mw[] = {"model", "worker"};
#define REG(field, type, name, help, labels, n, buckets, nb)                                                 \
    if (!(m->field = gw_metrics_register(reg, type, name, help, labels, n, buckets, nb, err)))               \
    return err->code
    REG(requests, GW_METRIC_COUNTER, "mmgw_api_requests_total",
        "API requests by model, endpoint and HTTP status.", l_mes, 3, NULL, 0);
    REG(duration, GW_METRIC_HISTOGRAM, "mmgw_api_request_duration_seconds",
        "Time from the request head to the last byte of the answer, by model and endpoint.", l_me, 2, NULL,
        0);
    REG(ttft, GW_METRIC_HISTOGRAM, "mmgw_api_time_to_first_token_seconds",
        "Time from the request head to the worker's first token.", l_me, 2, NULL, 0);
    REG(preprocess, GW_METRIC_HISTOGRAM, "mmgw_api_preprocess_seconds",
        "Preprocessing time per item and stage: fetch (http media), decode, resize (resize, normalize, "
        "patchify), "
        "tokenize (template, tokenizer, placeholder expansion; per request).",
        l_stage, 1, stage_buckets, sizeof stage_buckets / sizeof stage_buckets[0]);
    REG(tokens, GW_METRIC_COUNTER, "mmgw_api_tokens_total",
        "Tokens by model and kind (prompt, completion, cached).", l_mk, 2, NULL, 0);
    REG(media, GW_METRIC_COUNTER, "mmgw_api_media_total", "Media items preprocessed, by model and kind.",
        l_mk, 2, NULL, 0);
    REG(w_health, GW_METRIC_GAUGE, "mmgw_worker_healthy",
        "Worker health: 1 healthy, 0.5 unknown, 0 unhealthy.", l_mw, 2, NULL, 0);
    REG(w_breaker, GW_METRIC_GAUGE, "mmgw_worker_breaker_state",
        "Circuit breaker: 0 closed, 1 half-open, 2 open.", l_mw, 2, NULL, 0);
    REG(w_inflight, GW_METRIC_GAUGE, "mmgw_worker_in_flight",
        "Generate calls this gateway has on the worker.", l_mw, 2, NULL, 0);
    REG(w_load, GW_METRIC_GAUGE, "mmgw_worker_reported_load",
        "Running plus waiting requests in the worker's last Load.", l_mw, 2, NULL, 0);
    REG(w_requests, GW_METRIC_GAUGE, "mmgw_worker_requests",
        "Generate attempts sent to the worker by this generation.", l_mw, 2, NULL, 0);
    REG(w_failures, GW_METRIC_GAUGE, "mmgw_worker_failures",
        "Attempts on the worker that failed with a worker fault (this generation).", l_mw, 2, NULL, 0);
#undef REG
    static const char *const stages[4] = {"fetch", "decode", "resize", "tokenize"};
    for (int i = 0; i < 4; i++) m->stage[i] = gw_metric_series(m->preprocess, &stages[i]);
    return MM_OK;
}
