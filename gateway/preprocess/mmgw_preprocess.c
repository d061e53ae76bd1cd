/* mmgw-preprocess: run the multimodal preprocessing pipeline from the command line.
 *
 *   mmgw-preprocess --plugin m3|qwen2vl|PATH.so [--image FILE|URL]... [--video FILE|URL]...
 *                   --out OUT.safetensors [--repeat N] [--threads T] [--dtype f32|bf16]
 *
 * Writes pixel_values [N, C*T*P*P] and image_grid_thw [n, 3] for the images, pixel_values_videos,
 * video_grid_thw and video_frame_indices (I32, concatenated) for the videos, in command-line order within
 * each kind. --repeat N runs the whole pipeline from each input's bytes N times (on T threads) and ends
 * stderr with `throughput: X items/s`. Any failure prints one line and exits 1 (2 for usage errors). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_media.h"
#include "gw_media_job.h"
#include "gw_media_source.h"
#include "gw_plugin.h"
#include "gw_pool.h"
#include "mm_dtype.h"
#include "pp_write.h"

#define MAX_ITEMS 256
#define MAX_OPTIONS 32

struct item {
    int32_t kind;
    const char *src;
    struct gw_bytes bytes;
};

struct cli {
    const char *plugin, *plugin_dir, *out;
    struct item items[MAX_ITEMS];
    uint32_t n_items;
    struct mmgw_option options[MAX_OPTIONS];
    uint32_t n_options;
    long repeat, threads, video_threads;
    int32_t dtype;
    int fast_jpeg, quiet, print_prompt, no_autorotate;
    uint64_t max_bytes;
    long fetch_timeout_ms;
    long timeout_ms; /* per-item preprocessing budget; 0 = none */
};

struct run {
    struct gw_media_job job;
    uint32_t item, rep;
};

static atomic_uint_fast64_t sum_decode_ns, sum_post_ns;
static atomic_int n_failed;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mmgw-preprocess --plugin m3|qwen2vl|PATH.so [--image FILE|URL]... [--video FILE|URL]...\n"
            "                       --out OUT.safetensors [--repeat N] [--threads T] [--dtype f32|bf16]\n"
            "options:\n"
            "  --plugin NAME|PATH    a built-in plugin (from the plugin dir) or a path to a plugin .so\n"
            "  --plugin-dir DIR      where built-in plugins live (default: $MMGW_PLUGIN_DIR or ../plugins\n"
            "                        next to this executable)\n"
            "  --option KEY=VALUE    a plugin option, as `plugin_option KEY VALUE;` in mmgw.conf\n"
            "  --image SRC           an image: a file, file://, data: or http(s) URL (repeatable)\n"
            "  --video SRC           a video, same sources (repeatable)\n"
            "  --out FILE            the safetensors file to write (a symbolic link: at its target; a\n"
            "                        FIFO or device, e.g. /dev/stdout with --quiet, written directly)\n"
            "  --repeat N            run the pipeline N times from the bytes; print throughput (default 1)\n"
            "  --threads T           worker threads (default 1)\n"
            "  --dtype f32|bf16      pixel dtype (default f32)\n"
            "  --fast-jpeg           decode big JPEGs at reduced (DCT-scaled) size: faster, not bit-exact\n"
            "  --max-bytes N         refuse inputs larger than N bytes (default 512 MiB)\n"
            "  --fetch-timeout MS    http(s) transfer timeout (default 30000)\n"
            "  --timeout MS          time limit for preprocessing one item (default 60000, as the gateway's\n"
            "                        preprocess_timeout; 0 = none)\n"
            "  --video-threads N     FFmpeg decoder threads per video (default 1)\n"
            "  --no-autorotate       ignore videos' rotation metadata (default: frames are turned upright)\n"
            "  --print-prompt        print each item's prompt expansion (the plugin's expand_media)\n"
            "  --quiet               no per-item summary on stdout\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct cli *c)
{
    c->repeat = 1;
    c->threads = 1;
    c->timeout_ms = 60000;
    c->dtype = MM_DT_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--fast-jpeg") == 0) {
            c->fast_jpeg = 1;
            continue;
        }
        if (strcmp(a, "--quiet") == 0) {
            c->quiet = 1;
            continue;
        }
        if (strcmp(a, "--no-autorotate") == 0) {
            c->no_autorotate = 1;
            continue;
        }
        if (strcmp(a, "--print-prompt") == 0) {
            c->print_prompt = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "mmgw-preprocess: %s needs a value (or is unknown); see --help\n", a);
            return -1;
        }
        i++;
        if (strcmp(a, "--plugin") == 0)
            c->plugin = v;
        else if (strcmp(a, "--plugin-dir") == 0)
            c->plugin_dir = v;
        else if (strcmp(a, "--out") == 0)
            c->out = v;
        else if (strcmp(a, "--image") == 0 || strcmp(a, "--video") == 0) {
            if (c->n_items == MAX_ITEMS) {
                fprintf(stderr, "mmgw-preprocess: more than %d inputs\n", MAX_ITEMS);
                return -1;
            }
            c->items[c->n_items++] = (struct item){a[2] == 'i' ? MMGW_MEDIA_IMAGE : MMGW_MEDIA_VIDEO, v, {0}};
        } else if (strcmp(a, "--option") == 0) {
            char *eq = strchr(v, '=');
            if (!eq || eq == v || c->n_options == MAX_OPTIONS) {
                fprintf(stderr, "mmgw-preprocess: --option wants KEY=VALUE, got '%s'\n", v);
                return -1;
            }
            *eq = '\0';
            c->options[c->n_options++] = (struct mmgw_option){v, eq + 1};
        } else if (strcmp(a, "--repeat") == 0) {
            if (parse_long(v, 1, 1000000, &c->repeat)) {
                fprintf(stderr, "mmgw-preprocess: --repeat wants 1..1000000, got '%s'\n", v);
                return -1;
            }
        } else if (strcmp(a, "--threads") == 0) {
            if (parse_long(v, 1, 1024, &c->threads)) {
                fprintf(stderr, "mmgw-preprocess: --threads wants 1..1024, got '%s'\n", v);
                return -1;
            }
        } else if (strcmp(a, "--video-threads") == 0) {
            if (parse_long(v, 1, 64, &c->video_threads)) {
                fprintf(stderr, "mmgw-preprocess: --video-threads wants 1..64, got '%s'\n", v);
                return -1;
            }
        } else if (strcmp(a, "--fetch-timeout") == 0) {
            if (parse_long(v, 1, 3600000, &c->fetch_timeout_ms)) {
                fprintf(stderr,
                        "mmgw-preprocess: --fetch-timeout wants milliseconds (1..3600000), got '%s'\n", v);
                return -1;
            }
        } else if (strcmp(a, "--timeout") == 0) {
            if (parse_long(v, 0, 86400000, &c->timeout_ms)) {
                fprintf(stderr, "mmgw-preprocess: --timeout wants milliseconds (0..86400000), got '%s'\n", v);
                return -1;
            }
        } else if (strcmp(a, "--max-bytes") == 0) {
            long mb;
            if (parse_long(v, 1, 0x7fffffffffffffffL, &mb)) {
                fprintf(stderr, "mmgw-preprocess: --max-bytes wants a positive number, got '%s'\n", v);
                return -1;
            }
            c->max_bytes = (uint64_t)mb;
        } else if (strcmp(a, "--dtype") == 0) {
            if (strcmp(v, "f32") == 0)
                c->dtype = MM_DT_F32;
            else if (strcmp(v, "bf16") == 0)
                c->dtype = MM_DT_BF16;
            else {
                fprintf(stderr, "mmgw-preprocess: --dtype wants f32 or bf16, got '%s'\n", v);
                return -1;
            }
        } else {
            fprintf(stderr, "mmgw-preprocess: unknown option %s; see --help\n", a);
            return -1;
        }
    }
    if (!c->plugin || !c->out || c->n_items == 0) {
        fprintf(stderr, "mmgw-preprocess: --plugin, --out and at least one --image or --video are required; "
                        "see --help\n");
        return -1;
    }
    return 0;
}

static void on_done(struct gw_media_job *job, void *arg)
{
    struct run *r = arg;
    if (job->rc != MM_OK) {
        atomic_fetch_add(&n_failed, 1);
        return;
    }
    atomic_fetch_add(&sum_decode_ns, job->result.timing.decode_ns);
    atomic_fetch_add(&sum_post_ns, job->result.timing.post_ns);
    /* Only the first repetition's results are written out; the rest only measure. */
    if (r->rep != 0) gw_media_result_free(&job->result);
}

/* --print-prompt: the expansion as text, token runs written out (so it can be compared with a decoding of
 * the reference's token ids). */
static int32_t print_seg(void *ctx, const struct mmgw_prompt_seg *seg)
{
    (void)ctx;
    for (uint32_t i = 0; i < (seg->kind == MMGW_SEG_TOKEN ? seg->count : 1); i++)
        fwrite(seg->text, 1, seg->text_len, stdout);
    return MMGW_OK;
}

static int32_t print_prompt(const struct gw_plugin *p, const struct mmgw_plugin_instance *inst, uint32_t i,
                            const struct gw_media_result *r, struct mm_err *err)
{
    struct mmgw_media_info info;
    gw_media_result_info(r, &info);
    struct mmgw_seg_sink sink = {NULL, print_seg};
    struct mmgw_error perr = {{MM_OK, ""}};
    printf("prompt %u: ", i);
    int32_t rc = p->vt.expand_media(inst, &info, &sink, &perr);
    printf("\n");
    if (rc) return mm_err_set(err, rc, "expand_media: %s", perr.e.msg);
    return MM_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of the whole process (all threads): on a shared machine it is steadier than wall time. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The output tensors of one kind, pointing into the first repetition's results (no copies). */
struct kind_out {
    struct pp_chunk *pix, *grid, *fidx;
    int64_t *grids;
    int32_t *frames;
    uint64_t rows, n_frames;
    uint32_t n, dim;
};

static int32_t collect_kind(const struct cli *c, const struct run *runs, int32_t kind, struct kind_out *k,
                            struct mm_err *err)
{
    memset(k, 0, sizeof *k);
    for (uint32_t i = 0; i < c->n_items; i++)
        if (c->items[i].kind == kind) {
            k->n++;
            k->n_frames += runs[i].job.result.n_frames;
        }
    if (k->n == 0) return MM_OK;
    k->pix = calloc(k->n, sizeof *k->pix);
    k->grids = calloc((size_t)k->n * 3, sizeof *k->grids);
    k->frames = calloc(k->n_frames + 1, sizeof *k->frames);
    k->grid = calloc(1, sizeof *k->grid);
    k->fidx = calloc(1, sizeof *k->fidx);
    if (!k->pix || !k->grids || !k->frames || !k->grid || !k->fidx)
        return mm_err_set(err, MM_NOMEM, "out of memory assembling the output");
    uint32_t j = 0;
    uint64_t f = 0;
    for (uint32_t i = 0; i < c->n_items; i++) {
        const struct gw_media_result *r = &runs[i].job.result;
        if (c->items[i].kind != kind) continue;
        size_t esize = r->dtype == MM_DT_BF16 ? 2 : 4;
        k->pix[j] = (struct pp_chunk){r->pixels, (size_t)(r->n_patches * r->patch_dim * esize)};
        for (int d = 0; d < 3; d++) k->grids[j * 3 + d] = r->grid_thw[d];
        for (uint32_t q = 0; q < r->n_frames && r->frame_indices; q++)
            k->frames[f++] = (int32_t)r->frame_indices[q];
        k->rows += r->n_patches;
        k->dim = r->patch_dim;
        j++;
    }
    *k->grid = (struct pp_chunk){k->grids, (size_t)k->n * 3 * sizeof *k->grids};
    *k->fidx = (struct pp_chunk){k->frames, (size_t)f * sizeof *k->frames};
    k->n_frames = f;
    return MM_OK;
}

static void kind_out_free(struct kind_out *k)
{
    free(k->pix);
    free(k->grids);
    free(k->frames);
    free(k->grid);
    free(k->fidx);
}

static int32_t write_output(const struct cli *c, const struct run *runs, const char *plugin_name,
                            struct mm_err *err)
{
    struct kind_out img, vid;
    int32_t rc = collect_kind(c, runs, MMGW_MEDIA_IMAGE, &img, err);
    if (!rc) rc = collect_kind(c, runs, MMGW_MEDIA_VIDEO, &vid, err);
    struct pp_tensor t[5];
    size_t n = 0;
    if (!rc && img.n) {
        t[n++] =
            (struct pp_tensor){"pixel_values", c->dtype, 2, {(int64_t)img.rows, img.dim}, img.pix, img.n};
        t[n++] = (struct pp_tensor){"image_grid_thw", MM_DT_I64, 2, {img.n, 3}, img.grid, 1};
    }
    if (!rc && vid.n) {
        t[n++] = (struct pp_tensor){"pixel_values_videos",        c->dtype, 2,
                                    {(int64_t)vid.rows, vid.dim}, vid.pix,  vid.n};
        t[n++] = (struct pp_tensor){"video_grid_thw", MM_DT_I64, 2, {vid.n, 3}, vid.grid, 1};
        t[n++] =
            (struct pp_tensor){"video_frame_indices", MM_DT_I32, 1, {(int64_t)vid.n_frames, 0}, vid.fidx, 1};
    }
    if (!rc) rc = pp_write_safetensors(c->out, t, n, "plugin", plugin_name, err);
    kind_out_free(&img);
    kind_out_free(&vid);
    return rc;
}

int main(int argc, char **argv)
{
    struct cli *c = calloc(1, sizeof *c);
    if (!c) return 1;
    if (parse_args(argc, argv, c)) {
        free(c);
        return 2;
    }
    int status = 1;
    struct run *runs = NULL;
    uint64_t total = 0;

    struct mm_err err = {0};
    int32_t rc = gw_media_global_init(&err);
    struct gw_plugin *plugin = NULL;
    struct mmgw_plugin_instance *inst = NULL;
    if (!rc) rc = gw_plugin_load(c->plugin, c->plugin_dir, &plugin, &err);
    if (!rc) rc = gw_plugin_instance_create(plugin, c->options, c->n_options, &inst, &err);
    struct gw_source_limits slim = {.max_bytes = c->max_bytes, .timeout_ms = c->fetch_timeout_ms};
    for (uint32_t i = 0; !rc && i < c->n_items; i++)
        rc = gw_media_source_load(c->items[i].src, &slim, &c->items[i].bytes, &err);
    if (rc) {
        fprintf(stderr, "mmgw-preprocess: %s\n", err.msg);
        goto out;
    }

    struct gw_media_limits lim = {.max_input_bytes = c->max_bytes,
                                  .max_process_ns = c->timeout_ms ? (uint64_t)c->timeout_ms * 1000000u
                                                                  : GW_MEDIA_NO_TIME_LIMIT};
    total = (uint64_t)c->repeat * c->n_items;
    runs = calloc(total, sizeof *runs);
    struct gw_pool *pool = NULL;
    if (!runs) {
        fprintf(stderr, "mmgw-preprocess: out of memory for %llu runs\n", (unsigned long long)total);
        goto out;
    }
    uint32_t qcap = total > 0x7fffffff ? 0x7fffffff : (uint32_t)total;
    if ((rc = gw_pool_create((uint32_t)c->threads, qcap, &pool, &err))) {
        fprintf(stderr, "mmgw-preprocess: %s\n", err.msg);
        goto out;
    }
    double t0 = now_s(), c0 = cpu_s();
    /* Repetition-major order: the first repetition of every item is queued (and so done) first. */
    for (uint64_t k = 0; k < total; k++) {
        struct run *r = &runs[k];
        r->item = (uint32_t)(k % c->n_items);
        r->rep = (uint32_t)(k / c->n_items);
        const struct item *it = &c->items[r->item];
        r->job.input = (struct gw_media_input){it->kind, it->bytes.data, it->bytes.len, it->src};
        r->job.vt = &plugin->vt;
        r->job.inst = inst;
        r->job.opt = (struct gw_media_options){.dtype = c->dtype,
                                               .limits = &lim,
                                               .fast_jpeg = c->fast_jpeg,
                                               .no_autorotate = c->no_autorotate,
                                               .video_threads = (int32_t)c->video_threads};
        r->job.done = on_done;
        r->job.arg = r;
        if (gw_media_submit(pool, &r->job) != MM_OK) {
            /* cannot happen (the queue holds every job); wait for what was queued, then fail */
            fprintf(stderr, "mmgw-preprocess: cannot queue job %llu\n", (unsigned long long)k);
            gw_pool_destroy(pool);
            goto out;
        }
    }
    gw_pool_wait_idle(pool);
    double elapsed = now_s() - t0, cpu = cpu_s() - c0;
    gw_pool_destroy(pool);

    status = 0;
    if (atomic_load(&n_failed)) {
        /* Report the first failure in input order (repetitions fail alike). */
        for (uint64_t k = 0; k < total; k++)
            if (runs[k].job.rc != MM_OK) {
                fprintf(stderr, "mmgw-preprocess: %s\n", runs[k].job.err.msg);
                break;
            }
        status = 1;
    }
    if (!status) {
        for (uint32_t i = 0; i < c->n_items && !c->quiet; i++) {
            const struct gw_media_result *r = &runs[i].job.result;
            uint64_t tokens = plugin->vt.num_placeholder_tokens(inst, r->kind, r->grid_thw[0], r->grid_thw[1],
                                                                r->grid_thw[2]);
            printf("%s %s: %ux%u -> %ux%u, grid %lldx%lldx%lld, %llu patches, %llu tokens",
                   r->kind ? "video" : "image", c->items[i].src, r->src_width, r->src_height, r->width,
                   r->height, (long long)r->grid_thw[0], (long long)r->grid_thw[1], (long long)r->grid_thw[2],
                   (unsigned long long)r->n_patches, (unsigned long long)tokens);
            if (r->kind == MMGW_MEDIA_VIDEO)
                printf(", %u of %llu frames at %.3f fps", r->n_frames, (unsigned long long)r->total_frames,
                       r->source_fps);
            printf("\n");
        }
        for (uint32_t i = 0; i < c->n_items && c->print_prompt && !rc; i++)
            rc = print_prompt(plugin, inst, i, &runs[i].job.result, &err);
        if (rc) {
            fprintf(stderr, "mmgw-preprocess: %s\n", err.msg);
            status = 1;
        } else if ((rc = write_output(c, runs, plugin->vt.name, &err))) {
            fprintf(stderr, "mmgw-preprocess: %s\n", err.msg);
            status = 1;
        }
    }
    if (!status && c->repeat > 1) {
        double n = (double)total;
        fprintf(stderr,
                "per item: decode %.3f ms, resize+normalize+patch %.3f ms, cpu %.3f ms (%ld thread%s)\n",
                atomic_load(&sum_decode_ns) / n / 1e6, atomic_load(&sum_post_ns) / n / 1e6, cpu / n * 1e3,
                c->threads, c->threads == 1 ? "" : "s");
        fprintf(stderr, "throughput: %.2f items/s\n", n / elapsed);
    }

out:
    for (uint64_t k = 0; runs && k < total; k++) gw_media_result_free(&runs[k].job.result);
    free(runs);
    for (uint32_t i = 0; i < c->n_items; i++) gw_bytes_free(&c->items[i].bytes);
    gw_plugin_instance_destroy(plugin, inst);
    gw_plugin_unload(plugin);
    free(c);
    return status;
}
