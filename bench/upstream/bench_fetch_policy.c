/* Per-request costs on the gateway's hot path that this area adds:
 *   - the media URL policy check (libcurl's URL parser + our host checks) against libcurl's URL parser
 *     alone (the baseline: what any fetcher pays to parse a URL);
 *   - a router choice (prefix keys of a 2 000-token prompt + affinity lookup + power of two choices).
 * Usage: bench_fetch_policy [iterations] */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_affinity.h"
#include "gw_fetch_policy.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    const char *urls[] = {"https://images.example.com/photos/2024/cat.jpg?size=large", "http://2130706433/x",
                          "http://[::ffff:169.254.169.254]/latest", "https://cdn.example.org:8443/v/clip.mp4",
                          "http://metadata.google.internal/"};
    const char *allow[] = {"*.example.com", "10.0.0.0/8"};
    const char *deny[] = {"bad.example.com", "192.168.0.0/16"};
    struct gw_fetch_policy *p;
    struct mm_err e;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (gw_fetch_policy_create(allow, 2, deny, 2, &p, &e) != MM_OK) return 1;
    double t0 = now_s();
    long ok = 0;
    for (long i = 0; i < n; i++) {
        CURLU *u = curl_url();
        ok += curl_url_set(u, CURLUPART_URL, urls[i % 5], 0) == CURLUE_OK;
        char *h = NULL;
        curl_url_get(u, CURLUPART_HOST, &h, 0);
        curl_free(h);
        curl_url_cleanup(u);
    }
    double base = (now_s() - t0) / n;
    t0 = now_s();
    long allowed = 0;
    for (long i = 0; i < n; i++) {
        struct gw_fetch_target t;
        allowed += gw_fetch_policy_check_url(p, urls[i % 5], &t, &e) == MM_OK;
    }
    double pol = (now_s() - t0) / n;
    printf("URL parse only (libcurl, baseline): %7.2f us/URL\n", base * 1e6);
    printf("media fetch policy check:           %7.2f us/URL (%.2fx baseline; %ld of %ld allowed)\n",
           pol * 1e6, pol / base, allowed, n);

    uint32_t toks[2000];
    for (int i = 0; i < 2000; i++) toks[i] = (uint32_t)(i * 2654435761u % 200000);
    struct gw_affinity *a = gw_affinity_create(65536);
    uint64_t keys[256];
    long m = n / 10;
    t0 = now_s();
    for (long i = 0; i < m; i++) {
        toks[0] = (uint32_t)i;
        size_t k = gw_affinity_keys(toks, 2000, 128, NULL, 0, keys, 64);
        size_t pages;
        if (gw_affinity_lookup(a, keys, k, &pages) < 0) gw_affinity_record(a, keys, k, (int)(i % 8));
    }
    double aff = (now_s() - t0) / m;
    printf("prefix keys (2000 tokens, 15 pages) + lookup + record: %7.2f us/request\n", aff * 1e6);
    gw_affinity_destroy(a);
    gw_fetch_policy_destroy(p);
    return ok == n ? 0 : 1;
}
