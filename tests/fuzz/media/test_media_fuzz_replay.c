/* Deterministic corpus replay, run by every CTest: each seed in corpus/ and a few hundred mutations of it
 * (bit flips, byte runs, truncations, splices, chunk duplication) go through the image and the video
 * pipeline. Whatever the outcome, nothing may crash, leak (under ASan) or take more than 2 s. */
#include <dirent.h>
#include <string.h>
#include <time.h>

#include "fuzz_media.h"
#include "mmgw_test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One mutation of seed into buf (capacity cap); returns the new length. */
static size_t mutate(const uint8_t *seed, size_t len, uint8_t *buf, size_t cap)
{
    size_t n = len < cap ? len : cap;
    memcpy(buf, seed, n);
    if (n == 0) return 0;
    switch (next() % 6) {
    case 0: /* flip a few bits, past the first bytes so the format is still recognised */
        for (int i = 0, k = 1 + (int)(next() % 8); i < k; i++) {
            size_t at = n > 16 ? 16 + next() % (n - 16) : next() % n;
            buf[at] ^= (uint8_t)(1u << (next() % 8));
        }
        break;
    case 1: /* overwrite a run with 0x00 / 0xff / random */
    {
        size_t at = next() % n, l = 1 + next() % 64;
        uint8_t v = (uint8_t)next();
        for (size_t i = at; i < at + l && i < n; i++) buf[i] = (next() & 1) ? v : (uint8_t)next();
        break;
    }
    case 2: /* truncate */
        n = 1 + next() % n;
        break;
    case 3: /* large numbers where sizes live: set 4 bytes to 0xff */
    {
        size_t at = next() % n;
        for (size_t i = at; i < at + 4 && i < n; i++) buf[i] = 0xff;
        break;
    }
    case 4: /* duplicate a chunk onto a later place */
    {
        size_t a = next() % n, b = next() % n, l = 1 + next() % 256;
        for (size_t i = 0; i < l && a + i < n && b + i < n; i++) buf[b + i] = buf[a + i];
        break;
    }
    default: /* append garbage */
        for (int i = 0; i < 64 && n < cap; i++) buf[n++] = (uint8_t)next();
        break;
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "corpus";
    int per_seed = argc > 2 ? atoi(argv[2]) : 150;
    DIR *d = opendir(dir);
    if (!d) test_skip("no corpus directory");
    struct dirent *e;
    int seeds = 0, runs = 0, ok = 0;
    double worst = 0;
    static uint8_t buf[1 << 20];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        static uint8_t seed[1 << 20];
        size_t len = fread(seed, 1, sizeof seed, f);
        fclose(f);
        seeds++;
        int is_video = strstr(e->d_name, ".mp4") || strstr(e->d_name, ".webm") || strstr(e->d_name, ".gif");
        for (int i = -1; i < per_seed; i++) {
            size_t n = i < 0 ? len : mutate(seed, len, buf, sizeof buf);
            const uint8_t *in = i < 0 ? seed : buf;
            for (int kind = 0; kind < 2; kind++) {
                if (kind == MMGW_MEDIA_VIDEO && !is_video && i >= 0)
                    continue; /* images as video: seeds only */
                double t0 = now();
                int32_t rc = fz_run(kind, in, n, i & 1);
                double dt = now() - t0;
                if (dt > worst) worst = dt;
                CHECK_MSG(dt < 2.0, "%s mutation %d as %s: %.2f s", e->d_name, i, kind ? "video" : "image",
                          dt);
                if (i < 0 && ((kind == MMGW_MEDIA_IMAGE && !strstr(e->d_name, ".mp4") &&
                               !strstr(e->d_name, ".webm")) ||
                              (kind == MMGW_MEDIA_VIDEO && is_video)))
                    CHECK_MSG(rc == MM_OK, "seed %s as %s: %s", e->d_name, kind ? "video" : "image",
                              mm_status_name(rc));
                ok += rc == MM_OK;
                runs++;
            }
        }
    }
    closedir(d);
    printf("%d seeds, %d runs (%d accepted), slowest %.3f s\n", seeds, runs, ok, worst);
    CHECK(seeds >= 8);
    gw_plugin_instance_destroy(fz_plugin, fz_inst);
    gw_plugin_unload(fz_plugin);
    return test_done();
}
