/* bench-api-fast-worker: the real worker service (gRPC server, scheduler, continuous batching) over a model
 * that costs nothing (bench_engine.c: the scheduler tests' hash "model" with O(1) page bookkeeping), so the
 * API benchmark measures the gateway and the serving stack, not a model or a Python worker. Benchmark tool
 * only.
 *
 * The fake model's shape comes from the environment (defaults in brackets): FAKE_VOCAB [720],
 * FAKE_MAX_CONTEXT [32768], FAKE_BLOCK [16], FAKE_PAGES [65536], FAKE_IMAGE [681], FAKE_VIDEO [682],
 * FAKE_EOS [719]; the command line is mmgw-worker's (--model is required but not read). */
#include <stdlib.h>

#include "bench_engine.h"

int wk_worker_main(int argc, char **argv); /* mmgw-worker's main, renamed at compile time */

static long env(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

int main(int argc, char **argv)
{
    struct fake_config c = {
        .vocab = (int32_t)env("FAKE_VOCAB", 720),
        .max_context = env("FAKE_MAX_CONTEXT", 32768),
        .block = (int32_t)env("FAKE_BLOCK", 16),
        .pages = env("FAKE_PAGES", 65536),
        .hidden = 8,
        .eos = (int32_t)env("FAKE_EOS", 719),
        .image = (int32_t)env("FAKE_IMAGE", 681),
        .video = (int32_t)env("FAKE_VIDEO", 682),
    };
    bench_engine_set_config(&c);
    return wk_worker_main(argc, argv);
}
