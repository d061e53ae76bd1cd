/* Deterministic replay for a libFuzzer target in normal CTest: every seed file in the corpus folders given on
 * the command line, then a fixed number of seeded mutations of each (bit flips, byte edits, splices,
 * truncations). The sanitizer build turns any memory error into a failure; the target aborts on broken
 * invariants. Shared by the fuzz folders that include it. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void run(const uint8_t *d, size_t n)
{
    /* a fresh heap copy, so ASan sees reads one past the end */
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) return;
    memcpy(copy, d, n);
    LLVMFuzzerTestOneInput(copy, n);
    free(copy);
}

static void mutate_and_run(const uint8_t *seed, size_t n, const uint8_t *other, size_t on, int rounds)
{
    size_t cap = n * 2 + 64;
    uint8_t *buf = malloc(cap);
    if (!buf) return;
    for (int r = 0; r < rounds; r++) {
        size_t len = n;
        memcpy(buf, seed, n);
        int edits = 1 + (int)(next() % 4);
        for (int e = 0; e < edits; e++) {
            size_t pos = len ? next() % len : 0;
            switch (next() % 7) {
            case 0: /* flip a bit */
                if (len) buf[pos] ^= (uint8_t)(1u << (next() % 8));
                break;
            case 1: /* set an interesting byte */
                if (len)
                    buf[pos] =
                        (const uint8_t[]){0, '\r', '\n', ':', ';', ' ', '{', '}', '"', 0xff}[next() % 10];
                break;
            case 2: /* delete a byte */
                if (len) {
                    memmove(buf + pos, buf + pos + 1, len - pos - 1);
                    len--;
                }
                break;
            case 3: /* insert a byte */
                if (len < cap) {
                    memmove(buf + pos + 1, buf + pos, len - pos);
                    buf[pos] = (uint8_t)next();
                    len++;
                }
                break;
            case 4: /* truncate */
                len = pos;
                break;
            case 5: { /* splice in a piece of another seed */
                if (!on) break;
                size_t from = next() % on, cnt = 1 + next() % 16;
                if (from + cnt > on) cnt = on - from;
                if (len + cnt > cap) break;
                memmove(buf + pos + cnt, buf + pos, len - pos);
                memcpy(buf + pos, other + from, cnt);
                len += cnt;
                break;
            }
            default: { /* duplicate a run */
                size_t cnt = 1 + next() % 32;
                if (pos + cnt > len) cnt = len - pos;
                if (len + cnt > cap) break;
                memmove(buf + pos + cnt, buf + pos, len - pos);
                len += cnt;
                break;
            }
            }
        }
        run(buf, len);
    }
    free(buf);
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *b = malloc(1 << 20);
    *n = b ? fread(b, 1, 1 << 20, f) : 0;
    fclose(f);
    return b;
}

int main(int argc, char **argv)
{
    int rounds = 2000;
    const char *env = getenv("MMGW_FUZZ_ROUNDS");
    if (env) rounds = atoi(env);
    size_t n_seeds = 0;
    uint8_t *seeds[256];
    size_t lens[256];
    for (int a = 1; a < argc; a++) {
        DIR *d = opendir(argv[a]);
        if (!d) {
            fprintf(stderr, "cannot open corpus %s\n", argv[a]);
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d)) && n_seeds < 256) {
            if (e->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[a], e->d_name);
            seeds[n_seeds] = read_file(p, &lens[n_seeds]);
            if (seeds[n_seeds]) n_seeds++;
        }
        closedir(d);
    }
    if (n_seeds == 0) {
        fprintf(stderr, "no seeds\n");
        return 1;
    }
    for (size_t i = 0; i < n_seeds; i++) run(seeds[i], lens[i]);
    for (size_t i = 0; i < n_seeds; i++) {
        size_t j = (i + 1) % n_seeds;
        mutate_and_run(seeds[i], lens[i], seeds[j], lens[j], rounds);
    }
    for (size_t i = 0; i < n_seeds; i++) free(seeds[i]);
    printf("ok: %zu seeds, %d mutations each\n", n_seeds, rounds);
    return 0;
}
