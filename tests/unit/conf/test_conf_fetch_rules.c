/* media_fetch_allow / media_fetch_deny: the config parser (gw_core) and the fetch policy (mmgw_fetch) must
 * agree on which rules are valid. The parser checks them so that `mmgw -t` names the file and line; a rule it
 * let through and the policy refused would only fail later, at model start, without a line. Hand cases plus
 * random strings over the characters rules are made of. */
#include <stdio.h>
#include <string.h>

#include "gw_conf.h"
#include "gw_fetch_policy.h"
#include "mmgw_test.h"

static bool parser_accepts(const char *rule)
{
    char text[512];
    snprintf(text, sizeof text, "media { media_fetch_allow \"%s\"; }\n", rule);
    struct gw_config *c = NULL;
    struct mm_err err;
    mm_err_clear(&err);
    int32_t rc = gw_config_parse_text("t.conf", text, strlen(text), "/base", false, &c, &err);
    gw_config_unref(c);
    return rc == MM_OK;
}

static bool policy_accepts(const char *rule)
{
    struct mm_err err;
    mm_err_clear(&err);
    return gw_fetch_rule_check(rule, &err) == MM_OK;
}

static void agree(const char *rule)
{
    bool p = parser_accepts(rule), f = policy_accepts(rule);
    CHECK_MSG(p == f, "rule '%s': config parser %s, fetch policy %s", rule, p ? "accepts" : "refuses",
              f ? "accepts" : "refuses");
}

int main(void)
{
    static const char *const hand[] = {
        "10.0.0.0/8",
        "10.0.0.1/8",
        "10.0.0.1",
        "10.0.0.0/08",
        "10.0.0.0/33",
        "10.0.0.0/",
        "1.2.3",
        "1.2.3.4.",
        "0x7f.1",
        "127.1",
        "010.0.0.1",
        "::1",
        "[::1]",
        "[::1]/128",
        "fe80::/10",
        "fe80::1/10",
        "[1.2.3.4]",
        "fd00:ec2::254",
        "::ffff:1.2.3.4",
        "example.com",
        "example.com.",
        "foo..com",
        ".com",
        "*.example.com",
        "*.",
        "*",
        "*.123",
        "a_b.example",
        "-x.example",
        "xn--bcher-kva.example",
        "host:80",
        "exa mple.com",
        "a.b.c.d.e.0x10",
        "1e3",
        "images.example.com/8",
    };
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++) agree(hand[i]);
    /* a 63-byte label passes, 64 does not; a 127-byte rule passes, 128 does not */
    char buf[200];
    memset(buf, 'a', 63);
    strcpy(buf + 63, ".example");
    agree(buf);
    memset(buf, 'a', 64);
    strcpy(buf + 64, ".example");
    agree(buf);
    for (size_t n = 125; n <= 129; n++) {
        for (size_t k = 0; k < n; k++) buf[k] = (k % 10 == 9) ? '.' : 'b';
        buf[n] = '\0';
        agree(buf);
    }
    /* random strings over the alphabet of rules */
    static const char alphabet[] = "0123456789abcdefx.:/*[]-_AF";
    uint64_t s = 12345;
    for (int t = 0; t < 20000; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (s >> 33) % 14;
        for (size_t k = 0; k < n; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            buf[k] = alphabet[(s >> 40) % (sizeof alphabet - 1)];
        }
        buf[n] = '\0';
        agree(buf);
    }
    /* random addresses and prefixes: host bits, out-of-range parts and prefixes */
    for (int t = 0; t < 5000; t++) {
        uint32_t r[6];
        for (int k = 0; k < 6; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            r[k] = (uint32_t)(s >> 33);
        }
        if (t & 1)
            snprintf(buf, sizeof buf, "%u.%u.%u.%u/%u", r[0] % 260, r[1] % 4 * 64, r[2] % 2 * 128, r[3] % 3,
                     r[4] % 35);
        else
            snprintf(buf, sizeof buf, "%x:%x::%x/%u", r[0] % 0x10000, r[1] % 3 * 0x8000, r[2] % 3,
                     r[4] % 131);
        agree(buf);
    }
    return test_done();
}
