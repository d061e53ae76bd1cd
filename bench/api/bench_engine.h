/* BENCHMARK TOOL ONLY: a model engine behind worker/wk_engine.h that costs (almost) nothing, so that
 * bench-api-fast-worker measures the worker's serving stack (gRPC server, scheduler, batching) and the
 * gateway in front of it, not a model. See bench_engine.c for what it does and does not model. */
#ifndef BENCH_ENGINE_H
#define BENCH_ENGINE_H

#include "fake_model.h" /* struct fake_config, shared with the scheduler tests' fake */

/** Shape of the next engine wk_engine_open makes (the command line's --cache-pages wins over pages). */
void bench_engine_set_config(const struct fake_config *c);

#endif
