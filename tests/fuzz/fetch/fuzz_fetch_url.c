/* Fuzz the media-fetch policy's parsers: URL hosts in every spelling, CIDR/host rules and whole URLs,
 * with properties that must hold for any input:
 *   - an address that parses formats back to text that parses strictly to the same bytes;
 *   - a range that parses contains its own network address;
 *   - a URL the default policy accepts with an IP host has a public (global) address. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_fetch_policy.h"
#include "gw_ipaddr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void must(int cond)
{
    if (!cond) abort(); /* a fuzzing oracle: crash on a broken property so the fuzzer reports it */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > GW_FETCH_MAX_URL + 16) return 0;
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    size_t len = strlen(s);

    struct gw_ipaddr a, b;
    if (gw_ipaddr_parse_host(s, len, &a) == 1) {
        char text[64];
        gw_ipaddr_format(&a, text, sizeof(text));
        must(gw_ipaddr_parse_strict(text, strlen(text), &b) == 0);
        must(a.family == b.family && memcmp(a.bytes, b.bytes, a.family == 4 ? 4 : 16) == 0);
        (void)gw_ipaddr_classify(&a);
    }
    struct gw_cidr c;
    if (gw_cidr_parse(s, len, &c) == 0) must(gw_cidr_contains(&c, &c.net));

    struct mm_err err;
    (void)gw_fetch_rule_check(s, &err);

    struct gw_fetch_target t;
    if (gw_fetch_policy_check_url(NULL, s, &t, &err) == MM_OK) {
        must(strcmp(t.scheme, "http") == 0 || strcmp(t.scheme, "https") == 0);
        if (t.host_is_ip) must(gw_ipaddr_classify(&t.ip) == GW_ADDR_GLOBAL);
    }
    static struct gw_fetch_policy *rules;
    if (!rules) {
        const char *allow[] = {"127.0.0.1", "*.example.com", "10.0.0.0/8"};
        const char *deny[] = {"10.1.0.0/16", "bad.example.com"};
        if (gw_fetch_policy_create(allow, 3, deny, 2, &rules, &err) != MM_OK) abort();
    }
    (void)gw_fetch_policy_check_url(rules, s, &t, &err);
    free(s);
    return 0;
}
