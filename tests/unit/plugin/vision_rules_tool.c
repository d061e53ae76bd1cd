/* A line-oriented driver of the plugins' vision rules, for check_vision_rules.py (which compares it with the
 * reference implementations written in Python). Reads from stdin:
 *   R <plugin> <kind 0|1> <height> <width> <n_frames> <max_long_side_pixel|->   (smart_resize)
 *   S <plugin> <total_frames> <fps>                                              (sample_frames)
 * and prints per line "OK <h> <w>", "OK <n> <i0> <i1> ..." or "ERR <status name>". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_plugin.h"

struct entry {
    char key[64];
    struct gw_plugin *p;
    struct mmgw_plugin_instance *inst;
};

static struct entry cache[16];
static int n_cache;

static struct entry *get(const char *plugin, const char *long_side)
{
    char key[64];
    snprintf(key, sizeof key, "%s/%s", plugin, long_side);
    for (int i = 0; i < n_cache; i++)
        if (strcmp(cache[i].key, key) == 0) return &cache[i];
    if (n_cache == 16) return NULL;
    struct entry *e = &cache[n_cache];
    struct mm_err err = {0};
    if (gw_plugin_load(plugin, NULL, &e->p, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    struct mmgw_option opt = {"max_long_side_pixel", long_side};
    if (gw_plugin_instance_create(e->p, &opt, strcmp(long_side, "-") ? 1 : 0, &e->inst, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    snprintf(e->key, sizeof e->key, "%s", key);
    n_cache++;
    return e;
}

int main(void)
{
    char line[512];
    static uint32_t idx[100000];
    while (fgets(line, sizeof line, stdin)) {
        char op, plugin[32], ls[32];
        int kind;
        unsigned h, w, nf;
        unsigned long long total;
        double fps;
        struct mmgw_error perr = {{0, ""}};
        if (sscanf(line, " R %31s %d %u %u %u %31s", plugin, &kind, &h, &w, &nf, ls) == 6) {
            struct entry *e = get(plugin, ls);
            uint32_t oh = 0, ow = 0;
            int32_t rc = e ? e->p->vt.smart_resize(e->inst, kind, h, w, nf, &oh, &ow, &perr) : -1;
            if (rc)
                printf("ERR %s\n", mm_status_name(rc));
            else
                printf("OK %u %u\n", oh, ow);
        } else if (sscanf(line, " S %31s %llu %lf", plugin, &total, &fps) == 3) {
            struct entry *e = get(plugin, "-");
            uint32_t n = 0;
            int32_t rc = e ? e->p->vt.sample_frames(e->inst, total, fps, idx, 100000, &n, &perr) : -1;
            if (rc)
                printf("ERR %s\n", mm_status_name(rc));
            else {
                printf("OK %u", n);
                for (uint32_t i = 0; i < n; i++) printf(" %u", idx[i]);
                printf("\n");
            }
        } else if (sscanf(line, " %c", &op) == 1) {
            printf("ERR BADLINE\n");
        }
        fflush(stdout);
    }
    for (int i = 0; i < n_cache; i++) {
        gw_plugin_instance_destroy(cache[i].p, cache[i].inst);
        gw_plugin_unload(cache[i].p);
    }
    return 0;
}
