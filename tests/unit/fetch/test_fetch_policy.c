/* The URL/address policy decisions, without any network: public-looking hosts are only classified,
 * never contacted. */
#include "gw_fetch_policy.h"
#include "mmgw_test.h"

static int32_t url_rc(const struct gw_fetch_policy *p, const char *url, struct mm_err *e)
{
    struct gw_fetch_target t;
    mm_err_clear(e);
    return gw_fetch_policy_check_url(p, url, &t, e);
}

static void expect_url(const struct gw_fetch_policy *p, const char *url, int32_t code, const char *substr,
                       int line)
{
    struct mm_err e;
    int32_t rc = url_rc(p, url, &e);
    CHECK_MSG(rc == code, "line %d: %s: rc %d (%s), want %d", line, url, rc, e.msg, code);
    if (substr)
        CHECK_MSG(strstr(e.msg, substr) != NULL, "line %d: %s: message '%s' lacks '%s'", line, url, e.msg,
                  substr);
}

#define EXPECT_URL(p, url, code, substr) expect_url(p, url, code, substr, __LINE__)

static void test_schemes(void)
{
    EXPECT_URL(NULL, "http://example.com/a.png", MM_OK, NULL);
    EXPECT_URL(NULL, "https://example.com/a.png", MM_OK, NULL);
    EXPECT_URL(NULL, "HTTPS://EXAMPLE.COM/a.png", MM_OK, NULL);
    EXPECT_URL(NULL, "data:image/png;base64,AAAA", MM_INVALID, "media pipeline");
    EXPECT_URL(NULL, "ftp://example.com/a.png", MM_DENIED, "scheme 'ftp'");
    EXPECT_URL(NULL, "file:///etc/passwd", MM_DENIED, "scheme 'file'");
    EXPECT_URL(NULL, "gopher://example.com/", MM_DENIED, "scheme");
    EXPECT_URL(NULL, "dict://example.com:11211/", MM_DENIED, "scheme");
    EXPECT_URL(NULL, "javascript:alert(1)", MM_DENIED, "scheme");
    EXPECT_URL(NULL, "//example.com/a.png", MM_INVALID, "no scheme");
    EXPECT_URL(NULL, "example.com/a.png", MM_INVALID, "no scheme");
    EXPECT_URL(NULL, "", MM_INVALID, "empty");
    EXPECT_URL(NULL, "http://", MM_INVALID, NULL);
    EXPECT_URL(NULL, "http://exa mple.com/", MM_INVALID, NULL);
    EXPECT_URL(NULL, "http://example.com:0/", MM_INVALID, "port");
    EXPECT_URL(NULL, "http://example.com:99999/", MM_INVALID, NULL);
    char *longurl = malloc(GW_FETCH_MAX_URL + 64);
    if (longurl) {
        strcpy(longurl, "http://example.com/");
        memset(longurl + 19, 'a', GW_FETCH_MAX_URL);
        longurl[19 + GW_FETCH_MAX_URL] = '\0';
        EXPECT_URL(NULL, longurl, MM_INVALID, "longer");
        free(longurl);
    }
}

static void test_default_refusals(void)
{
    const char *loopback[] = {
        "http://127.0.0.1/",
        "http://127.0.0.1:8080/x",
        "http://2130706433/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://0x7f.1/",
        "http://017700000001/",
        "http://127.0.0.1./",
        "http://%31%32%37.0.0.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::7f00:1]/",
        "http://[2002:7f00:1::]/",
        "http://[0:0:0:0:0:ffff:127.0.0.1]/",
    };
    for (size_t i = 0; i < sizeof(loopback) / sizeof(loopback[0]); i++)
        EXPECT_URL(NULL, loopback[i], MM_DENIED, "loopback");
    EXPECT_URL(NULL, "http://0/", MM_DENIED, "unspecified");
    EXPECT_URL(NULL, "http://0.0.0.0/", MM_DENIED, "unspecified");
    EXPECT_URL(NULL, "http://[::]/", MM_DENIED, "unspecified");
    EXPECT_URL(NULL, "http://10.0.0.1/", MM_DENIED, "private");
    EXPECT_URL(NULL, "http://192.168.0.1/", MM_DENIED, "private");
    EXPECT_URL(NULL, "http://172.20.0.1/", MM_DENIED, "private");
    EXPECT_URL(NULL, "http://[fd00::1]/", MM_DENIED, "private");
    EXPECT_URL(NULL, "http://100.64.1.1/", MM_DENIED, "carrier-grade NAT");
    EXPECT_URL(NULL, "http://169.254.1.1/", MM_DENIED, "link-local");
    EXPECT_URL(NULL, "http://[fe80::1%25eth0]/", MM_DENIED, "link-local");
    EXPECT_URL(NULL, "http://224.0.0.1/", MM_DENIED, "multicast");
    EXPECT_URL(NULL, "http://[ff02::1]/", MM_DENIED, "multicast");
    EXPECT_URL(NULL, "http://255.255.255.255/", MM_DENIED, "broadcast");
    EXPECT_URL(NULL, "http://169.254.169.254/latest/meta-data/", MM_DENIED, "cloud metadata");
    EXPECT_URL(NULL, "http://2852039166/", MM_DENIED, "cloud metadata"); /* 169.254.169.254 as a number */
    EXPECT_URL(NULL, "http://[::ffff:169.254.169.254]/", MM_DENIED, "cloud metadata");
    EXPECT_URL(NULL, "http://[fd00:ec2::254]/", MM_DENIED, "cloud metadata");
    EXPECT_URL(NULL, "http://100.100.100.200/", MM_DENIED, "cloud metadata");
    EXPECT_URL(NULL, "http://192.0.2.1/", MM_DENIED, "reserved");
    /* names that are local by construction */
    EXPECT_URL(NULL, "http://localhost/", MM_DENIED, "single-label");
    EXPECT_URL(NULL, "http://LocalHost./", MM_DENIED, "single-label");
    EXPECT_URL(NULL, "http://a.localhost/", MM_DENIED, "local-network");
    EXPECT_URL(NULL, "http://foo.bar.LOCALHOST:9/", MM_DENIED, "local-network");
    EXPECT_URL(NULL, "http://metadata.google.internal/computeMetadata/v1/", MM_DENIED, "local-network");
    EXPECT_URL(NULL, "http://metadata/", MM_DENIED, "single-label");
    EXPECT_URL(NULL, "http://printer.local/", MM_DENIED, "local-network");
    EXPECT_URL(NULL, "http://router.home.arpa/", MM_DENIED, "local-network");
    /* numeric-looking names are malformed, not resolved */
    EXPECT_URL(NULL, "http://1.2.3.256/", MM_INVALID, "numeric");
    EXPECT_URL(NULL, "http://a.0x7f/", MM_INVALID, "numeric");
    /* public ones pass the URL step (they are not contacted here) */
    EXPECT_URL(NULL, "http://8.8.8.8/", MM_OK, NULL);
    EXPECT_URL(NULL, "http://134744072/", MM_OK, NULL); /* 8.8.8.8 */
    EXPECT_URL(NULL, "http://[2606:4700::1111]/", MM_OK, NULL);
    EXPECT_URL(NULL, "http://[::ffff:8.8.8.8]/", MM_OK, NULL);
    EXPECT_URL(NULL, "http://user:pw@images.example.org:8443/a.jpg?x=1#f", MM_OK, NULL);
}

static void test_target_fields(void)
{
    struct gw_fetch_target t;
    struct mm_err e;
    CHECK_EQ_INT(gw_fetch_policy_check_url(NULL, "HTTPS://Images.Example.ORG./a.jpg", &t, &e), MM_OK);
    CHECK_STR(t.scheme, "https");
    CHECK_STR(t.host, "images.example.org");
    CHECK_EQ_INT(t.port, 443);
    CHECK_EQ_INT(t.host_is_ip, 0);
    CHECK_EQ_INT(gw_fetch_policy_check_url(NULL, "http://[2606:4700::1111]:81/", &t, &e), MM_OK);
    CHECK_STR(t.host, "2606:4700::1111");
    CHECK_EQ_INT(t.port, 81);
    CHECK_EQ_INT(t.host_is_ip, 1);
    CHECK_EQ_INT(gw_fetch_policy_check_url(NULL, "http://134744072/", &t, &e), MM_OK);
    CHECK_STR(t.host, "8.8.8.8");
}

static struct gw_fetch_policy *policy(const char *const *allow, size_t na, const char *const *deny, size_t nd)
{
    struct gw_fetch_policy *p = NULL;
    struct mm_err e;
    int32_t rc = gw_fetch_policy_create(allow, na, deny, nd, &p, &e);
    CHECK_MSG(rc == MM_OK, "policy: %s", e.msg);
    return p;
}

static int addr_rc(const struct gw_fetch_policy *p, const char *host, const char *addr)
{
    struct gw_fetch_target t;
    memset(&t, 0, sizeof(t));
    struct mm_err e;
    if (gw_fetch_policy_check_url(p, host, &t, &e) != MM_OK) return -100;
    struct gw_ipaddr a;
    gw_ipaddr_parse_strict(addr, strlen(addr), &a);
    return gw_fetch_policy_check_addr(p, &t, &a, &e);
}

static void test_rules(void)
{
    const char *allow[] = {"127.0.0.1",  "cdn.internal", "*.corp.example",
                           "10.0.0.0/8", "fd00::/8",     "169.254.0.0/16"};
    const char *deny[] = {"10.9.0.0/16", "bad.example.com", "*.evil.example", "8.8.4.4", "[2001:4860::8888]"};
    struct gw_fetch_policy *p = policy(allow, 6, deny, 5);
    if (!p) return;
    EXPECT_URL(p, "http://127.0.0.1:9/", MM_OK, NULL);
    EXPECT_URL(p, "http://2130706433:9/", MM_OK, NULL); /* the same address, another spelling */
    EXPECT_URL(p, "http://127.0.0.2:9/", MM_DENIED, "loopback");
    EXPECT_URL(p, "http://localhost:9/", MM_DENIED, "single-label"); /* a name, not the allowed address */
    EXPECT_URL(p, "http://10.1.2.3/", MM_OK, NULL);
    EXPECT_URL(p, "http://10.9.1.1/", MM_DENIED, "media_fetch_deny '10.9.0.0/16'"); /* deny wins */
    EXPECT_URL(p, "http://[::ffff:10.9.1.1]/", MM_DENIED, "media_fetch_deny");
    EXPECT_URL(p, "http://[fd00::7]/", MM_OK, NULL);
    EXPECT_URL(p, "http://169.254.1.1/", MM_OK, NULL);
    /* a range does not open a metadata endpoint inside it */
    EXPECT_URL(p, "http://169.254.169.254/", MM_DENIED, "cloud metadata");
    EXPECT_URL(p, "http://cdn.internal/x", MM_OK, NULL);
    EXPECT_URL(p, "http://CDN.internal./x", MM_OK, NULL);
    EXPECT_URL(p, "http://other.internal/x", MM_DENIED, "local-network");
    EXPECT_URL(p, "http://a.corp.example/x", MM_OK, NULL);
    EXPECT_URL(p, "http://corp.example/x", MM_OK, NULL); /* not matched by the wildcard, but public */
    EXPECT_URL(p, "http://bad.example.com/", MM_DENIED, "media_fetch_deny 'bad.example.com'");
    EXPECT_URL(p, "http://x.y.evil.example/", MM_DENIED, "media_fetch_deny '*.evil.example'");
    EXPECT_URL(p, "http://evil.example/", MM_OK, NULL);
    EXPECT_URL(p, "http://8.8.4.4/", MM_DENIED, "media_fetch_deny");
    EXPECT_URL(p, "http://[2001:4860::8888]/", MM_DENIED, "media_fetch_deny");

    /* connect-time checks: an allowed name may reach private space but never metadata */
    CHECK_EQ_INT(addr_rc(p, "http://cdn.internal/", "192.168.7.7"), MM_OK);
    CHECK_EQ_INT(addr_rc(p, "http://cdn.internal/", "169.254.169.254"), MM_DENIED);
    CHECK_EQ_INT(addr_rc(p, "http://cdn.internal/", "10.9.0.1"), MM_DENIED); /* deny still wins */
    CHECK_EQ_INT(addr_rc(p, "http://public.example.org/", "192.168.7.7"), MM_DENIED);
    CHECK_EQ_INT(addr_rc(p, "http://public.example.org/", "127.0.0.1"), MM_OK); /* allowed address */
    CHECK_EQ_INT(addr_rc(p, "http://public.example.org/", "::ffff:127.0.0.1"), MM_OK);
    CHECK_EQ_INT(addr_rc(p, "http://public.example.org/", "127.0.0.3"), MM_DENIED);
    CHECK_EQ_INT(addr_rc(p, "http://public.example.org/", "93.184.216.34"), MM_OK);
    CHECK_EQ_INT(addr_rc(p, "http://public.example.org/", "8.8.4.4"), MM_DENIED);
    gw_fetch_policy_destroy(p);

    /* metadata opens only to an exact rule */
    const char *allow_md[] = {"169.254.169.254"};
    p = policy(allow_md, 1, NULL, 0);
    if (p) {
        EXPECT_URL(p, "http://169.254.169.254/", MM_OK, NULL);
        gw_fetch_policy_destroy(p);
    }
    /* deny everything */
    const char *deny_all[] = {"0.0.0.0/0", "::/0"};
    p = policy(NULL, 0, deny_all, 2);
    if (p) {
        EXPECT_URL(p, "http://8.8.8.8/", MM_DENIED, "media_fetch_deny");
        CHECK_EQ_INT(addr_rc(p, "http://public.example.org/", "2606:4700::1111"), MM_DENIED);
        gw_fetch_policy_destroy(p);
    }
}

static void test_rule_syntax(void)
{
    struct mm_err e;
    CHECK_EQ_INT(gw_fetch_rule_check("images.example.com", &e), MM_OK);
    CHECK_EQ_INT(gw_fetch_rule_check("*.example.com", &e), MM_OK);
    CHECK_EQ_INT(gw_fetch_rule_check("10.0.0.0/8", &e), MM_OK);
    CHECK_EQ_INT(gw_fetch_rule_check("::1", &e), MM_OK);
    CHECK_EQ_INT(gw_fetch_rule_check("[::1]", &e), MM_OK);
    CHECK_EQ_INT(gw_fetch_rule_check("", &e), MM_INVALID);
    CHECK_EQ_INT(gw_fetch_rule_check("10.0.0.1/8", &e), MM_INVALID);
    CHECK(strstr(e.msg, "10.0.0.1/8") != NULL);
    CHECK_EQ_INT(gw_fetch_rule_check("127.1", &e), MM_INVALID);
    CHECK_EQ_INT(gw_fetch_rule_check("*.", &e), MM_INVALID);
    CHECK_EQ_INT(gw_fetch_rule_check("exa mple.com", &e), MM_INVALID);
    CHECK_EQ_INT(gw_fetch_rule_check("http://x.com", &e), MM_INVALID);
    CHECK_EQ_INT(gw_fetch_rule_check("a..b", &e), MM_INVALID);
    const char *bad[] = {"ok.example", "not valid"};
    struct gw_fetch_policy *p = (struct gw_fetch_policy *)1;
    CHECK_EQ_INT(gw_fetch_policy_create(bad, 2, NULL, 0, &p, &e), MM_INVALID);
    CHECK(p == NULL);
    CHECK(strstr(e.msg, "not valid") != NULL);
}

int main(void)
{
    test_schemes();
    test_default_refusals();
    test_target_fields();
    test_rules();
    test_rule_syntax();
    return test_done();
}
