/* The fetcher against in-process stub HTTP servers on loopback addresses only. Every refused URL is
 * checked to have left the servers untouched (no connection accepted). */
#include <event2/event.h>
#include <time.h>

#include "gw_fetch.h"
#include "http_stub.h"
#include "mmgw_test.h"

static struct event_base *base;

struct outcome {
    int done;
    int32_t status;
    char message[512];
    size_t len;
    long http_status;
    char content_type[64];
    char final_url[256];
    uint32_t redirects;
};

static void on_done(void *arg, struct gw_fetch_result *r)
{
    struct outcome *o = arg;
    o->done++;
    o->status = r->status;
    snprintf(o->message, sizeof(o->message), "%s", r->message);
    o->len = r->body.len;
    o->http_status = r->http_status;
    snprintf(o->content_type, sizeof(o->content_type), "%s", r->content_type ? r->content_type : "");
    snprintf(o->final_url, sizeof(o->final_url), "%s", r->final_url ? r->final_url : "");
    o->redirects = r->redirects;
    event_base_loopbreak(base);
}

static void on_guard(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(base);
}

/* Run the loop for at most ms, or until a callback breaks it. */
static void run_for(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    struct event *guard = evtimer_new(base, on_guard, NULL);
    if (!guard) return;
    evtimer_add(guard, &tv);
    event_base_dispatch(base);
    event_free(guard);
}

/* Run the loop until the outcome is in, or give up after max_ms. */
static void wait_for(struct outcome *o, int max_ms)
{
    run_for(max_ms);
    (void)o;
}

/* Spin the loop for ms so that any stray connection attempt would land. */
static void spin(int ms)
{
    run_for(ms);
}

/* tmpl with every "PORT" replaced by port (the URL lists are data, so no printf formats). */
static void with_port(char *out, size_t cap, const char *tmpl, unsigned port)
{
    char num[16];
    snprintf(num, sizeof(num), "%u", port);
    size_t o = 0;
    for (const char *s = tmpl; *s && o + 1 < cap;) {
        if (strncmp(s, "PORT", 4) == 0) {
            for (const char *n = num; *n && o + 1 < cap;) out[o++] = *n++;
            s += 4;
        } else {
            out[o++] = *s++;
        }
    }
    out[o] = '\0';
}

static struct gw_fetcher *fetcher(const struct gw_fetch_policy *p, const char *const *resolve,
                                  size_t n_resolve)
{
    struct gw_fetch_opts o;
    memset(&o, 0, sizeof(o));
    o.policy = p;
    o.limits.timeout_ms = 5000;
    o.resolve = resolve;
    o.n_resolve = n_resolve;
    struct gw_fetcher *f = NULL;
    struct mm_err e;
    CHECK_MSG(gw_fetcher_create(base, &o, &f, &e) == MM_OK, "fetcher: %s", e.msg);
    return f;
}

static struct gw_fetch_policy *policy(const char *const *allow, size_t na, const char *const *deny, size_t nd)
{
    struct gw_fetch_policy *p = NULL;
    struct mm_err e;
    CHECK_MSG(gw_fetch_policy_create(allow, na, deny, nd, &p, &e) == MM_OK, "policy: %s", e.msg);
    return p;
}

static int32_t fetch(struct gw_fetcher *f, const char *url, const struct gw_fetch_limits *lim,
                     struct outcome *o)
{
    memset(o, 0, sizeof(*o));
    struct mm_err e;
    mm_err_clear(&e);
    int32_t rc = gw_fetch_start(f, url, lim, on_done, o, NULL, &e);
    if (rc != MM_OK) {
        o->status = rc;
        snprintf(o->message, sizeof(o->message), "%s", e.msg);
        return rc;
    }
    wait_for(o, 8000);
    CHECK_MSG(o->done == 1, "%s: no result", url);
    return o->status;
}

/* Default policy: every spelling of loopback is refused before any connection. */
static void test_default_refuses_loopback(struct http_stub *a)
{
    struct gw_fetcher *f = fetcher(NULL, NULL, 0);
    if (!f) return;
    unsigned port = http_stub_port(a);
    const char *forms[] = {"http://127.0.0.1:PORT/ok?n=1",
                           "http://2130706433:PORT/ok?n=1",
                           "http://0x7f000001:PORT/ok?n=1",
                           "http://0177.0.0.1:PORT/ok?n=1",
                           "http://127.1:PORT/ok?n=1",
                           "http://0x7f.1:PORT/ok?n=1",
                           "http://017700000001:PORT/ok?n=1",
                           "http://127.000.000.001:PORT/ok?n=1",
                           "http://127.0.0.1.:PORT/ok?n=1",
                           "http://%31%32%37.0.0.1:PORT/ok?n=1",
                           "http://[::ffff:127.0.0.1]:PORT/ok",
                           "http://[::ffff:7f00:1]:PORT/ok",
                           "http://[::127.0.0.1]:PORT/ok",
                           "http://[0:0:0:0:0:ffff:127.0.0.1]:PORT/ok",
                           "http://[::1]:PORT/ok",
                           "http://localhost:PORT/ok?n=1",
                           "http://LOCALHOST.:PORT/ok?n=1",
                           "http://img.localhost:PORT/ok?n=1",
                           "http://0:PORT/ok?n=1",
                           "http://0.0.0.0:PORT/ok?n=1",
                           "HTTP://127.0.0.1:PORT/ok?n=1"};
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        char url[256];
        with_port(url, sizeof(url), forms[i], port);
        struct outcome o;
        int32_t rc = fetch(f, url, NULL, &o);
        CHECK_MSG(rc == MM_DENIED, "%s: rc %d (%s)", url, rc, o.message);
        CHECK_MSG(o.message[0] != '\0', "%s: refusal without a reason", url);
    }
    spin(50);
    CHECK_EQ_INT(http_stub_accepts(a), 0);
    CHECK_EQ_INT(gw_fetcher_active(f), 0);
    gw_fetcher_destroy(f);
}

static void test_allowed_fetch(struct http_stub *a)
{
    const char *allow[] = {"127.0.0.1"};
    struct gw_fetch_policy *p = policy(allow, 1, NULL, 0);
    struct gw_fetcher *f = fetcher(p, NULL, 0);
    if (!f) return;
    unsigned port = http_stub_port(a);
    char url[256];
    struct outcome o;
    int before = http_stub_requests(a);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/ok?n=12345", port);
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_OK);
    CHECK_EQ_INT(o.len, 12345);
    CHECK_EQ_INT(o.http_status, 200);
    CHECK_STR(o.content_type, "image/png");
    CHECK_STR(o.final_url, url);
    CHECK_EQ_INT(http_stub_requests(a), before + 1);
    /* the same allowed address in another spelling */
    snprintf(url, sizeof(url), "http://2130706433:%u/ok?n=7", port);
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_OK);
    CHECK_EQ_INT(o.len, 7);
    /* chunked body under the cap */
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/chunked?n=100000", port);
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_OK);
    CHECK_EQ_INT(o.len, 100000);
    /* 404 */
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/missing", port);
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_NOT_FOUND);
    CHECK(strstr(o.message, "404") != NULL);
    /* an allowed redirect */
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/redirect?to=http://127.0.0.1:%u/ok?n=5", port, port);
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_OK);
    CHECK_EQ_INT(o.len, 5);
    CHECK_EQ_INT(o.redirects, 1);
    CHECK(strstr(o.final_url, "/ok?n=5") != NULL);
    gw_fetcher_destroy(f);
    gw_fetch_policy_destroy(p);
}

/* Redirects from the allowed server to refused places never reach them. */
static void test_redirect_rechecked(struct http_stub *a, struct http_stub *b)
{
    const char *allow[] = {"127.0.0.1"};
    struct gw_fetch_policy *p = policy(allow, 1, NULL, 0);
    struct gw_fetcher *f = fetcher(p, NULL, 0);
    if (!f) return;
    unsigned pa = http_stub_port(a), pb = http_stub_port(b);
    const char *targets[] = {"http://127.0.0.2:PORT/ok?n=1",
                             "http://localhost:PORT/ok?n=1",
                             "http://[::ffff:127.0.0.2]:PORT/ok?n=1",
                             "http://2130706434:PORT/ok?n=1",
                             "ftp://127.0.0.2:PORT/",
                             "http://169.254.169.254:PORT/latest/meta-data/"};
    for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
        char to[128], url[256];
        with_port(to, sizeof(to), targets[i], pb);
        snprintf(url, sizeof(url), "http://127.0.0.1:%u/redirect?to=%s", pa, to);
        struct outcome o;
        int32_t rc = fetch(f, url, NULL, &o);
        CHECK_MSG(rc == MM_DENIED, "redirect to %s: rc %d (%s)", to, rc, o.message);
        CHECK_MSG(strstr(o.message, "redirected") != NULL, "redirect to %s: message '%s'", to, o.message);
    }
    spin(50);
    CHECK_EQ_INT(http_stub_accepts(b), 0);

    /* a redirect loop stops at the hop limit */
    struct gw_fetch_limits lim = {.max_redirects = 3};
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/loop", pa);
    int before = http_stub_requests(a);
    struct outcome o;
    CHECK_EQ_INT(fetch(f, url, &lim, &o), MM_INVALID);
    CHECK(strstr(o.message, "more than 3") != NULL);
    CHECK_EQ_INT(http_stub_requests(a) - before, 4);
    lim.max_redirects = GW_FETCH_NO_REDIRECTS;
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/redirect?to=/ok?n=1", pa);
    CHECK_EQ_INT(fetch(f, url, &lim, &o), MM_INVALID);
    gw_fetcher_destroy(f);
    gw_fetch_policy_destroy(p);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_caps(struct http_stub *a)
{
    const char *allow[] = {"127.0.0.0/8"};
    struct gw_fetch_policy *p = policy(allow, 1, NULL, 0);
    struct gw_fetcher *f = fetcher(p, NULL, 0);
    if (!f) return;
    unsigned port = http_stub_port(a);
    char url[256];
    struct outcome o;
    struct gw_fetch_limits lim = {.max_bytes = 1000};
    /* at the cap is fine, one past is not */
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/ok?n=1000", port);
    CHECK_EQ_INT(fetch(f, url, &lim, &o), MM_OK);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/ok?n=1001", port);
    CHECK_EQ_INT(fetch(f, url, &lim, &o), MM_TOO_LARGE);
    CHECK(strstr(o.message, "1000-byte cap") != NULL);
    /* a Content-Length that claims too much fails before the body */
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/big", port);
    CHECK_EQ_INT(fetch(f, url, &lim, &o), MM_TOO_LARGE);
    /* a chunked body is cut off the moment it passes the cap: the server is stopped far short of 64 MiB */
    uint64_t sent_before = http_stub_body_bytes(a);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/chunked?n=67108864", port);
    CHECK_EQ_INT(fetch(f, url, &lim, &o), MM_TOO_LARGE);
    spin(100);
    uint64_t sent = http_stub_body_bytes(a) - sent_before;
    CHECK_MSG(sent < (16u << 20), "server sent %llu bytes after the cap", (unsigned long long)sent);
    /* a slow server hits the total time cap */
    struct gw_fetch_limits slow = {.timeout_ms = 300};
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/slow", port);
    double t0 = now_s();
    CHECK_EQ_INT(fetch(f, url, &slow, &o), MM_TIMEOUT);
    double took = now_s() - t0;
    CHECK_MSG(took >= 0.25 && took < 2.0, "slow fetch took %.3f s", took);
    CHECK(strstr(o.message, "300 ms") != NULL);
    /* the time cap spans redirect hops */
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/redirect?to=/slow", port);
    t0 = now_s();
    CHECK_EQ_INT(fetch(f, url, &slow, &o), MM_TIMEOUT);
    took = now_s() - t0;
    CHECK_MSG(took < 2.0, "redirected slow fetch took %.3f s", took);
    /* nothing listening: a connection failure, not a hang */
    snprintf(url, sizeof(url), "http://127.0.0.1:1/ok");
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_IO);
    gw_fetcher_destroy(f);
    gw_fetch_policy_destroy(p);
}

/* The address checked is the address connected to, whatever the name resolved to: a name pinned (as a
 * DNS answer would) to a refused address is refused at connect time and that server is never reached. */
static void test_no_rebinding(struct http_stub *a, struct http_stub *b2)
{
    unsigned pa = http_stub_port(a), pb = http_stub_port(b2);
    char r1[128], r2[128], r3[128];
    snprintf(r1, sizeof(r1), "media.example.test:%u:127.0.0.2", pb);
    snprintf(r2, sizeof(r2), "good.example.test:%u:127.0.0.1", pa);
    snprintf(r3, sizeof(r3), "both.example.test:%u:127.0.0.2,127.0.0.1", pa);
    const char *resolve[] = {r1, r2, r3};
    const char *allow[] = {"127.0.0.1"};
    struct gw_fetch_policy *p = policy(allow, 1, NULL, 0);
    struct gw_fetcher *f = fetcher(p, resolve, 3);
    if (!f) return;
    char url[256];
    struct outcome o;
    int b_before = http_stub_accepts(b2);
    snprintf(url, sizeof(url), "http://media.example.test:%u/ok?n=3", pb);
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_DENIED);
    CHECK(strstr(o.message, "127.0.0.2") != NULL && strstr(o.message, "loopback") != NULL);
    CHECK_EQ_INT(http_stub_accepts(b2), b_before);
    snprintf(url, sizeof(url), "http://good.example.test:%u/ok?n=3", pa);
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_OK);
    CHECK_EQ_INT(o.len, 3);
    /* two answers: the refused one is skipped, the allowed one used */
    snprintf(url, sizeof(url), "http://both.example.test:%u/ok?n=4", pa);
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_OK);
    CHECK_EQ_INT(o.len, 4);
    gw_fetcher_destroy(f);
    gw_fetch_policy_destroy(p);

    /* an allowed name may reach the address it resolves to; deny still wins */
    const char *allow_name[] = {"media.example.test"};
    const char *deny[] = {"127.0.0.3"};
    char r4[128];
    snprintf(r4, sizeof(r4), "denied.example.test:%u:127.0.0.3", pb);
    const char *resolve2[] = {r1, r4};
    const char *allow2[] = {"media.example.test", "denied.example.test"};
    (void)allow_name;
    p = policy(allow2, 2, deny, 1);
    f = fetcher(p, resolve2, 2);
    if (!f) return;
    snprintf(url, sizeof(url), "http://media.example.test:%u/ok?n=2", pb);
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_OK);
    CHECK_EQ_INT(http_stub_accepts(b2), b_before + 1);
    snprintf(url, sizeof(url), "http://denied.example.test:%u/ok?n=2", pb);
    CHECK_EQ_INT(fetch(f, url, NULL, &o), MM_DENIED);
    CHECK(strstr(o.message, "media_fetch_deny") != NULL);
    gw_fetcher_destroy(f);
    gw_fetch_policy_destroy(p);
}

static void never_called(void *arg, struct gw_fetch_result *r)
{
    int *n = arg;
    (*n)++;
}

static void test_cancel_and_destroy(struct http_stub *a)
{
    const char *allow[] = {"127.0.0.1"};
    struct gw_fetch_policy *p = policy(allow, 1, NULL, 0);
    struct gw_fetcher *f = fetcher(p, NULL, 0);
    if (!f) return;
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/slow", http_stub_port(a));
    int calls = 0;
    struct gw_fetch *t = NULL;
    struct mm_err e;
    CHECK_EQ_INT(gw_fetch_start(f, url, NULL, never_called, &calls, &t, &e), MM_OK);
    spin(150);
    CHECK_EQ_INT(gw_fetcher_active(f), 1);
    gw_fetch_cancel(t);
    CHECK_EQ_INT(gw_fetcher_active(f), 0);
    spin(150);
    CHECK_EQ_INT(calls, 0);
    /* destroying the fetcher ends what is in flight with MM_CANCELLED */
    struct outcome o;
    memset(&o, 0, sizeof(o));
    CHECK_EQ_INT(gw_fetch_start(f, url, NULL, on_done, &o, NULL, &e), MM_OK);
    spin(100);
    gw_fetcher_destroy(f);
    CHECK_EQ_INT(o.done, 1);
    CHECK_EQ_INT(o.status, MM_CANCELLED);
    gw_fetch_policy_destroy(p);
}

int main(void)
{
    struct mm_err e;
    if (gw_fetch_global_init(&e) != MM_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    base = event_base_new();
    struct http_stub *a = http_stub_start(base, "127.0.0.1", 0);
    struct http_stub *b = http_stub_start(base, "127.0.0.2", 0);
    if (!base || !a || !b) test_skip("cannot listen on 127.0.0.1 and 127.0.0.2");
    struct http_stub *b2 = http_stub_start(base, "127.0.0.2", http_stub_port(a));
    if (!b2) b2 = b; /* same port on .2 not available: the rebinding test then uses b's own port */
    test_default_refuses_loopback(a);
    test_allowed_fetch(a);
    test_redirect_rechecked(a, b);
    test_caps(a);
    test_no_rebinding(a, b2);
    test_cancel_and_destroy(a);
    if (b2 != b) http_stub_stop(b2);
    http_stub_stop(a);
    http_stub_stop(b);
    event_base_free(base);
    return test_done();
}
