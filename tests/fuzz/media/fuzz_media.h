/* The body shared by the media fuzz targets and the replay test: run the whole pipeline (m3 plugin, both
 * dtypes alternately) on arbitrary bytes under tight limits, so a fuzzer explores parsers and not
 * legitimately huge inputs. Only a crash, a sanitizer report, a leak or a hang is a failure. */
#ifndef FUZZ_MEDIA_H
#define FUZZ_MEDIA_H

#include <stdio.h>
#include <stdlib.h>

#include "gw_media.h"
#include "gw_plugin.h"
#include "mm_dtype.h"

static struct gw_plugin *fz_plugin;
static struct mmgw_plugin_instance *fz_inst;

static int fz_init(void)
{
    if (fz_inst) return 0;
    struct mm_err err = {0};
    if (gw_media_global_init(&err) || gw_plugin_load("m3", getenv("MMGW_PLUGIN_DIR"), &fz_plugin, &err) ||
        gw_plugin_instance_create(fz_plugin, NULL, 0, &fz_inst, &err)) {
        fprintf(stderr, "fuzz set-up: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int32_t fz_run(int32_t kind, const uint8_t *data, size_t size, int bf16)
{
    if (fz_init()) abort();
    struct gw_media_limits lim = {.max_source_pixels = 4u << 20,
                                  .max_source_side = 8192,
                                  .max_video_frames = 2000,
                                  .max_output_bytes = 256u << 20,
                                  .max_process_ns = 2000000000ull};
    struct gw_media_options opt = {.dtype = bf16 ? MM_DT_BF16 : MM_DT_F32, .limits = &lim};
    struct gw_media_input in = {kind, data, size, "fuzz"};
    struct gw_media_result r;
    struct mm_err err = {0};
    int32_t rc = gw_media_process(&in, &fz_plugin->vt, fz_inst, &opt, &r, &err);
    gw_media_result_free(&r);
    return rc;
}

#endif
