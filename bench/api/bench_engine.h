/* BENCHMARK TOOL ONLY: a model engine behind worker/wk_engine.h that costs (almost) nothing, so that
 * bench-api-fast-worker measures the worker's serving stack (gRPC server, scheduler, batching) and the
 * gateway in front of it, not a model. See bench_engine.c for what it does and does not model. */
#ifndef BENCH_ENGINE_H
#define BENCH_ENGINE_H

#include <stdint.h>

struct bench_engine_config {
    int32_t vocab;
    int64_t max_context;
    int32_t block;
    int64_t pages;
    int32_t hidden;
    int32_t eos, image, video;
};

/** Shape of the next engine wk_engine_open makes (the command line's --cache-pages wins over pages). */
void bench_engine_set_config(const struct bench_engine_config *c);

#endif
