/* mmgw-quantize --in DIR --out DIR [--block N] [--vision] [--threads N]
 *
 * Converts a checkpoint's linear weights to FP8-E4M3 with DeepSeek-style block scales, the form the released
 * M3 weights are reported to use: for each weight W [rows][cols], a tensor `<name>_scale_inv` (F32,
 * [ceil(rows/N)][ceil(cols/N)]) with W ~= fp8 * scale_inv blockwise, scale_inv = amax(block) / 448.
 * Quantized: the text model's attention, index, dense-MLP and expert projections (every 2-D `*_proj.weight`
 * and `experts.E.w1/w2/w3.weight` under language_model.model.layers); with --vision also the vision tower's
 * and the projectors' linear weights. Embeddings, the LM head, norms, routers and biases keep their dtype.
 * config.json gains a quantization_config; other tensors are copied as they are.
 * The blocks of a weight are quantized on --threads threads (default: the online CPUs; one thread took 6
 * minutes for a 6 GiB synthetic checkpoint). Note: the writer holds the output in memory (fine for
 * test-sized checkpoints). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mm_dtype.h"
#include "mm_safetensors.h"
#include "mm_text.h"

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int is_target(const char *name, int vision)
{
    if (!ends_with(name, ".weight")) return 0;
    if (strstr(name, "language_model.model.layers.") || strstr(name, "model.language_model.layers.")) {
        if (strstr(name, "_norm.")) return 0;
        if (ends_with(name, "_proj.weight")) return 1;
        return strstr(name, ".experts.") && (ends_with(name, ".w1.weight") || ends_with(name, ".w2.weight") ||
                                             ends_with(name, ".w3.weight"));
    }
    if (!vision) return 0;
    if (strstr(name, "vision_tower.") && strstr(name, ".encoder.layers.") &&
        (ends_with(name, "_proj.weight") || strstr(name, ".mlp.fc")))
        return 1;
    return strstr(name, "multi_modal_projector.linear_") || strstr(name, "patch_merge_mlp.linear_");
}

/* Rows of blocks br0, br0 + step, ... of one [rows][cols] f32 matrix: q (rows*cols bytes) and scales
 * ([sr][sc]); each block's bytes depend on that block alone, so the threads' shares give the same result as
 * one thread. */
struct q_job {
    const float *w;
    int64_t rows, cols, br0, step;
    int32_t bs;
    uint8_t *q;
    float *scale;
};

static void *quantize_rows(void *arg)
{
    const struct q_job *j = arg;
    const float *w = j->w;
    const int64_t rows = j->rows, cols = j->cols, bs = j->bs, sc = (cols + bs - 1) / bs;
    uint8_t *q = j->q;
    float *scale = j->scale;
    for (int64_t br = j->br0 * bs; br < rows; br += j->step * bs)
        for (int64_t bc = 0; bc < cols; bc += bs) {
            int64_t r1 = br + bs < rows ? br + bs : rows, c1 = bc + bs < cols ? bc + bs : cols;
            float amax = 0.0f;
            for (int64_t r = br; r < r1; r++)
                for (int64_t c = bc; c < c1; c++) amax = fmaxf(amax, fabsf(w[r * cols + c]));
            float s = amax > 0.0f ? amax / 448.0f : 1.0f;
            scale[(br / bs) * sc + bc / bs] = s;
            for (int64_t r = br; r < r1; r++)
                for (int64_t c = bc; c < c1; c++) q[r * cols + c] = mm_f32_to_f8e4m3(w[r * cols + c] / s);
        }
    return NULL;
}

#define Q_THREADS_MAX 256

/* Quantize one [rows][cols] f32 matrix on up to n_threads threads (fewer where it has fewer block rows) */
static void quantize(const float *w, int64_t rows, int64_t cols, int32_t bs, uint8_t *q, float *scale,
                     int n_threads)
{
    const int64_t brows = (rows + bs - 1) / bs;
    int n = n_threads < brows ? n_threads : (int)brows;
    if (n < 1) n = 1;
    struct q_job jobs[Q_THREADS_MAX];
    pthread_t tid[Q_THREADS_MAX];
    int started[Q_THREADS_MAX] = {0};
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct q_job){
            .w = w, .rows = rows, .cols = cols, .br0 = i, .step = n, .bs = bs, .q = q, .scale = scale};
        started[i] = i > 0 && pthread_create(&tid[i], NULL, quantize_rows, &jobs[i]) == 0;
        if (i > 0 && !started[i]) jobs[i].step = 0; /* not started: run below on this thread */
    }
    quantize_rows(&jobs[0]);
    for (int i = 1; i < n; i++) {
        if (started[i]) {
            pthread_join(tid[i], NULL);
        } else {
            jobs[i].step = n;
            quantize_rows(&jobs[i]);
        }
    }
}

static int copy_text_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb");
    if (!a) return errno == ENOENT ? 0 : -1;
    FILE *b = fopen(to, "wb");
    if (!b) {
        fclose(a);
        return -1;
    }
    char buf[65536];
    size_t n;
    int ok = 1;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) ok &= fwrite(buf, 1, n, b) == n;
    fclose(a);
    if (fclose(b)) ok = 0;
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    int32_t bs = 128;
    int vision = 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = cpus < 1 ? 1 : cpus > Q_THREADS_MAX ? Q_THREADS_MAX : (int)cpus;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vision")) {
            vision = 1;
        } else if (i + 1 < argc && !strcmp(argv[i], "--in")) {
            in = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--out")) {
            out = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--block")) {
            int64_t v;
            if (mm_parse_i64(argv[++i], 1, 4096, &v)) {
                fprintf(stderr, "mmgw-quantize: bad --block\n");
                return 2;
            }
            bs = (int32_t)v;
        } else if (i + 1 < argc && !strcmp(argv[i], "--threads")) {
            int64_t v;
            if (mm_parse_i64(argv[++i], 1, Q_THREADS_MAX, &v)) {
                fprintf(stderr, "mmgw-quantize: bad --threads (1-%d)\n", Q_THREADS_MAX);
                return 2;
            }
            n_threads = (int)v;
        } else {
            fprintf(stderr, "usage: mmgw-quantize --in DIR --out DIR [--block N] [--vision] [--threads N]\n");
            return 2;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "usage: mmgw-quantize --in DIR --out DIR [--block N] [--vision] [--threads N]\n");
        return 2;
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", in);
    struct mm_err err = {0};
    struct mm_st_file *f = NULL;
    if (mm_st_open(p, &f, &err)) {
        fprintf(stderr, "mmgw-quantize: %s (sharded input is not supported: merge the shards first)\n",
                err.msg);
        return 1;
    }
    if (mkdir(out, 0755) && errno != EEXIST) {
        fprintf(stderr, "mmgw-quantize: %s: %s\n", out, strerror(errno));
        mm_st_close(f);
        return 1;
    }
    /* in place, the copies below would truncate tokenizer.json and generation_config.json to nothing (each is
     * opened for writing while being read) and the unquantized weights would be gone */
    struct stat st_in, st_out;
    if (stat(in, &st_in) == 0 && stat(out, &st_out) == 0 && st_in.st_dev == st_out.st_dev &&
        st_in.st_ino == st_out.st_ino) {
        fprintf(stderr,
                "mmgw-quantize: --out %s is the --in folder: write the FP8 checkpoint to another one\n", out);
        mm_st_close(f);
        return 2;
    }
    struct mm_st_writer *w = mm_st_writer_create();
    int rc = w ? 0 : 1;
    int64_t n_q = 0, bytes_in = 0, bytes_out = 0;
    for (size_t i = 0; !rc && i < mm_st_count(f); i++) {
        const struct mm_st_tensor *t = mm_st_at(f, i);
        bytes_in += (int64_t)t->nbytes;
        int q = t->ndim == 2 && is_target(t->name, vision) &&
                (t->dtype == MM_DT_BF16 || t->dtype == MM_DT_F16 || t->dtype == MM_DT_F32);
        if (!q) {
            rc = mm_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, &err) != MM_OK;
            bytes_out += (int64_t)t->nbytes;
            continue;
        }
        int64_t rows = t->shape[0], cols = t->shape[1], sr = (rows + bs - 1) / bs, sc = (cols + bs - 1) / bs;
        float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
        uint8_t *qq = malloc((size_t)(rows * cols));
        float *s = malloc(sizeof(float) * (size_t)(sr * sc));
        if (!wf || !qq || !s || mm_convert_to_f32(wf, t->data, t->dtype, (size_t)(rows * cols))) {
            snprintf(err.msg, sizeof err.msg, "%s: out of memory", t->name);
            rc = 1;
        } else {
            quantize(wf, rows, cols, bs, qq, s, n_threads);
            char sname[1024];
            snprintf(sname, sizeof sname, "%s_scale_inv", t->name);
            rc = mm_st_writer_add(w, t->name, MM_DT_F8_E4M3, 2, t->shape, qq, (size_t)(rows * cols), &err) ||
                 mm_st_writer_add(w, sname, MM_DT_F32, 2, (int64_t[]){sr, sc}, s,
                                  sizeof(float) * (size_t)(sr * sc), &err);
            n_q++;
            bytes_out += rows * cols + 4 * sr * sc;
        }
        free(wf);
        free(qq);
        free(s);
    }
    if (!rc) {
        snprintf(p, sizeof p, "%s/model.safetensors", out);
        mm_st_writer_add_metadata(w, "format", "pt", &err);
        rc = mm_st_writer_save(w, p, &err) != MM_OK;
    }
    mm_st_writer_destroy(w);
    mm_st_close(f);
    if (rc) {
        fprintf(stderr, "mmgw-quantize: %s\n", err.msg);
        return 1;
    }
    /* config.json with a quantization_config */
    snprintf(p, sizeof p, "%s/config.json", in);
    json_error_t je;
    json_t *cfg = json_load_file(p, JSON_PRESERVE_ORDER, &je);
    if (!cfg || !json_is_object(cfg)) {
        fprintf(stderr, "mmgw-quantize: %s: %s\n", p, cfg ? "not an object" : je.text);
        json_decref(cfg);
        return 1;
    }
    json_object_set_new(cfg, "quantization_config",
                        json_pack("{s:s, s:s, s:s, s:[i,i]}", "quant_method", "fp8", "fmt", "e4m3",
                                  "activation_scheme", "dynamic", "weight_block_size", bs, bs));
    snprintf(p, sizeof p, "%s/config.json", out);
    if (json_dump_file(cfg, p, JSON_INDENT(1) | JSON_PRESERVE_ORDER)) {
        fprintf(stderr, "mmgw-quantize: %s: write failed\n", p);
        json_decref(cfg);
        return 1;
    }
    json_decref(cfg);
    const char *extra[] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/%s", in, extra[i]);
        snprintf(b, sizeof b, "%s/%s", out, extra[i]);
        if (copy_text_file(a, b)) fprintf(stderr, "mmgw-quantize: warning: could not copy %s\n", a);
    }
    fprintf(stderr, "mmgw-quantize: %lld weights to FP8 (%dx%d blocks), %.1f MiB -> %.1f MiB\n",
            (long long)n_q, bs, bs, (double)bytes_in / 1048576.0, (double)bytes_out / 1048576.0);
    return 0;
}
