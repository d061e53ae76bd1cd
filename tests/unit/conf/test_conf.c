/* Config parser: values, defaults, includes, and every error class reported as "file:line: message". */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gw_conf.h"
#include "mm_log.h"
#include "mmgw_test.h"

static struct gw_config *parse_ok(const char *text)
{
    struct gw_config *c = NULL;
    struct mm_err err;
    int32_t rc = gw_config_parse_text("t.conf", text, strlen(text), "/base", false, &c, &err);
    CHECK_MSG(rc == MM_OK, "parse failed: %s", err.msg);
    return c;
}

/* Parse text and require an error whose message equals want exactly. */
static void parse_err(const char *text, const char *want)
{
    struct gw_config *c = NULL;
    struct mm_err err;
    mm_err_clear(&err);
    int32_t rc = gw_config_parse_text("t.conf", text, strlen(text), "/base", false, &c, &err);
    CHECK_MSG(rc != MM_OK && c == NULL, "expected an error for: %s", text);
    CHECK_MSG(strcmp(err.msg, want) == 0, "\n  got:  %s\n  want: %s", err.msg, want);
    gw_config_unref(c);
}

static uint16_t port_of(const struct gw_listen_conf *l)
{
    if (l->addr.ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)&l->addr)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&l->addr)->sin_port);
}

static void test_full(void)
{
    const char *text =
        "# comment\n"
        "http {\n"
        "    listen 127.0.0.1:8080;          # trailing comment\n"
        "    listen [::1]:8443 ssl http2 backlog=64;\n"
        "    listen 9000;\n"
        "    ssl_certificate certs/c.pem; ssl_certificate_key /abs/k.pem;\n"
        "    worker_threads 3; client_max_body_size 64m; keepalive_timeout 1m30s;\n"
        "    send_timeout 500ms; client_header_timeout 10; log_level debug; access_log on;\n"
        "    http2 off; stream_buffer_max 256k; max_connections 7;\n"
        "}\n"
        "model \"m3 tiny\" {\n"
        "    plugin m3;\n"
        "    plugin_option max_long_side_pixel 1024;\n"
        "    plugin_option 'quoted key' \"a \\\"b\\\" #c\";\n"
        "    tokenizer tok/tokenizer.json;\n"
        "    upstream 127.0.0.1:50051;\n"
        "    upstream worker-2:50051 [::1]:50052 unix:/run/w.sock;\n"
        "    max_model_len 32768; preprocess_threads 4; retries 0; breaker_cooldown 2s;\n"
        "}\n"
        "model other { plugin ./plugins/x.so; upstream 10.0.0.1:1; }\n"
        "media { media_fetch_allow 10.0.0.0/8 images.example.com; media_fetch_allow *.cdn.example.com;\n"
        "        media_fetch_deny 203.0.113.0/24 fd00::/8; fetch_timeout 10s; fetch_max_bytes 32m; }\n";
    struct gw_config *c = parse_ok(text);
    if (!c) return;
    const struct gw_http_conf *h = &c->http;
    CHECK_EQ_INT(h->n_listen, 3);
    CHECK_STR(h->listen[0].text, "127.0.0.1:8080");
    CHECK_EQ_INT(h->listen[0].addr.ss_family, AF_INET);
    CHECK_EQ_INT(port_of(&h->listen[0]), 8080);
    CHECK(!h->listen[0].ssl && !h->listen[0].http2);
    CHECK_EQ_INT(h->listen[0].line, 3);
    CHECK_EQ_INT(h->listen[1].addr.ss_family, AF_INET6);
    CHECK_EQ_INT(port_of(&h->listen[1]), 8443);
    CHECK(h->listen[1].ssl && h->listen[1].http2);
    CHECK_EQ_INT(h->listen[1].backlog, 64);
    CHECK_EQ_INT(port_of(&h->listen[2]), 9000);
    CHECK_EQ_INT(((const struct sockaddr_in *)&h->listen[2].addr)->sin_addr.s_addr, htonl(INADDR_ANY));
    CHECK_STR(h->ssl_certificate, "/base/certs/c.pem"); /* relative to the file's directory */
    CHECK_STR(h->ssl_certificate_key, "/abs/k.pem");
    CHECK_EQ_INT(h->worker_threads, 3);
    CHECK_EQ_INT(h->client_max_body_size, 64LL << 20);
    CHECK_EQ_INT(h->keepalive_timeout_ms, 90000);
    CHECK_EQ_INT(h->send_timeout_ms, 500);
    CHECK_EQ_INT(h->client_header_timeout_ms, 10000); /* a bare number is seconds */
    CHECK_EQ_INT(h->log_level, MM_LOG_DEBUG);
    CHECK(h->access_log);
    CHECK(!h->http2);
    CHECK_EQ_INT(h->stream_buffer_max, 256 * 1024);
    CHECK_EQ_INT(h->max_connections, 7);
    /* defaults for what was not written */
    CHECK_EQ_INT(h->client_body_timeout_ms, 60000);
    CHECK_EQ_INT(h->client_max_headers, 100);
    CHECK_EQ_INT(h->http2_max_concurrent_streams, 128);

    CHECK_EQ_INT(c->n_models, 2);
    const struct gw_model_conf *m = gw_config_model(c, "m3 tiny");
    CHECK(m != NULL);
    if (m) {
        CHECK_STR(m->plugin, "m3");
        CHECK_EQ_INT(m->n_plugin_options, 2);
        CHECK_STR(m->plugin_options[0].key, "max_long_side_pixel");
        CHECK_STR(m->plugin_options[0].value, "1024");
        CHECK_STR(m->plugin_options[1].key, "quoted key");
        CHECK_STR(m->plugin_options[1].value, "a \"b\" #c");
        CHECK_STR(m->tokenizer, "/base/tok/tokenizer.json");
        CHECK_EQ_INT(m->n_upstreams, 4);
        CHECK_STR(m->upstreams[0], "127.0.0.1:50051");
        CHECK_STR(m->upstreams[1], "worker-2:50051");
        CHECK_STR(m->upstreams[2], "[::1]:50052");
        CHECK_STR(m->upstreams[3], "unix:/run/w.sock");
        CHECK_EQ_INT(m->max_model_len, 32768);
        CHECK_EQ_INT(m->preprocess_threads, 4);
        CHECK_EQ_INT(m->retries, 0);
        CHECK_EQ_INT(m->breaker_cooldown_ms, 2000);
        CHECK_EQ_INT(m->breaker_failures, 5); /* default */
        CHECK_EQ_INT(m->line, 11);
        CHECK_STR(m->file, "t.conf");
    }
    const struct gw_model_conf *o = gw_config_model(c, "other");
    CHECK(o && strcmp(o->plugin, "/base/./plugins/x.so") == 0); /* a path, not a built-in name */
    CHECK(gw_config_model(c, "missing") == NULL);
    const struct gw_media_conf *md = &c->media;
    CHECK_EQ_INT(md->n_fetch_allow, 3);
    CHECK_STR(md->fetch_allow[0], "10.0.0.0/8");
    CHECK_STR(md->fetch_allow[2], "*.cdn.example.com");
    CHECK_EQ_INT(md->n_fetch_deny, 2);
    CHECK_STR(md->fetch_deny[1], "fd00::/8");
    CHECK_EQ_INT(md->fetch_timeout_ms, 10000);
    CHECK_EQ_INT(md->fetch_max_bytes, 32 << 20);
    CHECK(md->allow_data_urls); /* default on */
    gw_config_ref(c);
    gw_config_unref(c);
    gw_config_unref(c);
}

static void test_defaults(void)
{
    struct gw_config *c;
    struct mm_err err;
    CHECK(gw_config_defaults(&c, &err) == MM_OK);
    CHECK_EQ_INT(c->http.keepalive_timeout_ms, 75000);
    CHECK_EQ_INT(c->http.client_max_body_size, 64 << 20);
    CHECK_EQ_INT(c->http.worker_threads, 0);
    CHECK(c->http.http2);
    CHECK(!c->http.access_log);
    CHECK_EQ_INT(c->http.n_listen, 0);
    CHECK_EQ_INT(c->media.fetch_max_redirects, 5);
    gw_config_unref(c);
    /* many list entries grow the arena arrays correctly */
    char text[8192];
    size_t n = (size_t)snprintf(text, sizeof text, "http { ");
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "listen 127.0.0.1:%d; ", 1000 + i);
    snprintf(text + n, sizeof text - n, "}\n");
    c = parse_ok(text);
    if (c) {
        CHECK_EQ_INT(c->http.n_listen, 40);
        for (int i = 0; i < 40; i++) CHECK_EQ_INT(port_of(&c->http.listen[i]), 1000 + i);
        gw_config_unref(c);
    }
}

static void test_values(void)
{
    int64_t v;
    CHECK(gw_conf_parse_size("512", &v) == 0 && v == 512);
    CHECK(gw_conf_parse_size("16k", &v) == 0 && v == 16384);
    CHECK(gw_conf_parse_size("16K", &v) == 0 && v == 16384);
    CHECK(gw_conf_parse_size("64m", &v) == 0 && v == 64LL << 20);
    CHECK(gw_conf_parse_size("2g", &v) == 0 && v == 2LL << 30);
    CHECK(gw_conf_parse_size("", &v) != 0);
    CHECK(gw_conf_parse_size("k", &v) != 0);
    CHECK(gw_conf_parse_size("1x", &v) != 0);
    CHECK(gw_conf_parse_size("-1", &v) != 0);
    CHECK(gw_conf_parse_size("1.5m", &v) != 0);
    CHECK(gw_conf_parse_size("99999999999999999999", &v) != 0);
    CHECK(gw_conf_parse_size("9999999999999g", &v) != 0);
    CHECK(gw_conf_parse_msec("10", &v) == 0 && v == 10000);
    CHECK(gw_conf_parse_msec("500ms", &v) == 0 && v == 500);
    CHECK(gw_conf_parse_msec("5m", &v) == 0 && v == 300000);
    CHECK(gw_conf_parse_msec("1h", &v) == 0 && v == 3600000);
    CHECK(gw_conf_parse_msec("1d", &v) == 0 && v == 86400000);
    CHECK(gw_conf_parse_msec("1m30s", &v) == 0 && v == 90000);
    CHECK(gw_conf_parse_msec("1s500ms", &v) == 0 && v == 1500);
    CHECK(gw_conf_parse_msec("1.5s", &v) != 0);
    CHECK(gw_conf_parse_msec("s", &v) != 0);
    CHECK(gw_conf_parse_msec("5y", &v) != 0);
    /* parts in falling units, each once (nginx's rule): a repeat or a rise is a typo, not a sum */
    CHECK(gw_conf_parse_msec("1h1h", &v) != 0);
    CHECK(gw_conf_parse_msec("30m1h", &v) != 0);
    CHECK(gw_conf_parse_msec("500ms1s", &v) != 0);
    CHECK(gw_conf_parse_msec("1d2h3m4s5ms", &v) == 0 && v == 86400000 + 7200000 + 180000 + 4000 + 5);
    CHECK(gw_conf_parse_msec("", &v) != 0);
    struct sockaddr_storage ss;
    socklen_t len;
    CHECK(gw_conf_parse_addr("127.0.0.1:80", &ss, &len) == 0 && ss.ss_family == AF_INET);
    CHECK(gw_conf_parse_addr("[::1]:8443", &ss, &len) == 0 && ss.ss_family == AF_INET6);
    CHECK(gw_conf_parse_addr("*:80", &ss, &len) == 0);
    CHECK(gw_conf_parse_addr("localhost:0", &ss, &len) == 0 &&
          ((struct sockaddr_in *)&ss)->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
    CHECK(gw_conf_parse_addr("8080", &ss, &len) == 0);
    CHECK(gw_conf_parse_addr("1.2.3:80", &ss, &len) != 0);
    CHECK(gw_conf_parse_addr("[::1]80", &ss, &len) != 0);
    CHECK(gw_conf_parse_addr(":80", &ss, &len) != 0);
    CHECK(gw_conf_parse_addr("127.0.0.1:65536", &ss, &len) != 0);
    CHECK(gw_conf_parse_addr("127.0.0.1:-1", &ss, &len) != 0);
    CHECK(gw_conf_parse_addr("127.0.0.1:", &ss, &len) != 0);
    CHECK(gw_conf_parse_addr("example.com:80", &ss, &len) != 0);
}

static void test_errors(void)
{
    parse_err("http {\n  bogus 1;\n}\n", "t.conf:2: unknown directive \"bogus\"");
    parse_err("listen 1;\n", "t.conf:1: \"listen\" directive is not allowed here");
    parse_err("http {\n  plugin m3;\n}\n", "t.conf:2: \"plugin\" directive is not allowed here");
    parse_err("media {\n  http { }\n}\n", "t.conf:2: \"http\" directive is not allowed here");
    parse_err("http {\n\n  worker_threads 1 2;\n}\n",
              "t.conf:3: invalid number of arguments in \"worker_threads\" directive");
    parse_err("http {\n  access_log;\n}\n",
              "t.conf:2: invalid number of arguments in \"access_log\" directive");
    parse_err("model {\n}\n", "t.conf:1: invalid number of arguments in \"model\" directive");
    parse_err("http {\n  worker_threads x;\n}\n",
              "t.conf:2: \"worker_threads\" directive: invalid value \"x\" (expected an integer)");
    parse_err("http {\n  worker_threads 2000;\n}\n", "t.conf:2: \"worker_threads\" directive: invalid value "
                                                     "\"2000\" (expected an integer from 0 to 1024)");
    parse_err("http {\n  client_max_body_size 5q;\n}\n",
              "t.conf:2: \"client_max_body_size\" directive: invalid value \"5q\" (expected a size such as "
              "512, 16k, "
              "64m, 1g)");
    parse_err("http {\n  send_timeout 0;\n}\n", "t.conf:2: \"send_timeout\" directive: invalid value \"0\" "
                                                "(expected a time in ms from 1 to 86400000)");
    parse_err("http {\n  http2 yes;\n}\n",
              "t.conf:2: \"http2\" directive: invalid value \"yes\" (expected \"on\" or \"off\")");
    parse_err(
        "http {\n  log_level loud;\n}\n",
        "t.conf:2: \"log_level\" directive: invalid value \"loud\" (expected error, warn, info or debug)");
    parse_err("http {\n  listen 1.2.3.4:99999;\n}\n",
              "t.conf:2: \"listen\" directive: invalid address \"1.2.3.4:99999\" (expected IP:PORT, "
              "[IPv6]:PORT, *:PORT or "
              "PORT)");
    parse_err(
        "http {\n  listen 1.2.3.4:9 quic;\n}\n",
        "t.conf:2: \"listen\" directive: invalid parameter \"quic\" (expected ssl, http2 or backlog=N)");
    parse_err("http {\n  worker_threads 1;\n  worker_threads 1;\n}\n",
              "t.conf:3: \"worker_threads\" directive is duplicate");
    parse_err("media { }\nmedia { }\n", "t.conf:2: \"media\" directive is duplicate");
    parse_err("model a { plugin m3; upstream h:1; }\nmodel a { plugin m3; upstream h:1; }\n",
              "t.conf:2: \"model\" directive: model \"a\" is already defined at t.conf:1");
    parse_err("model a { plugin m3; plugin_option k 1; plugin_option k 2; upstream h:1; }\n",
              "t.conf:1: \"plugin_option\" directive: option \"k\" is duplicate");
    parse_err("model a { plugin m3; upstream h:0; }\n",
              "t.conf:1: \"upstream\" directive: invalid address \"h:0\" (expected HOST:PORT, [IPv6]:PORT or "
              "unix:PATH)");
    parse_err("model a { plugin m3; upstream h:1 h:1; }\n",
              "t.conf:1: \"upstream\" directive: worker \"h:1\" is listed twice");
    parse_err("model a {\n plugin m3;\n upstream h:1 h:2;\n upstream h:2;\n}\n",
              "t.conf:4: \"upstream\" directive: worker \"h:2\" is listed twice");
    parse_err("model a {\n upstream h:1;\n}\n", "t.conf:1: model \"a\" has no \"plugin\" directive");
    parse_err("model a {\n plugin m3;\n}\n", "t.conf:1: model \"a\" has no \"upstream\" directive");
    parse_err(
        "media { media_fetch_deny 1.2.3.4/33; }\n",
        "t.conf:1: \"media_fetch_deny\" directive: invalid value \"1.2.3.4/33\": not an IP address or CIDR "
        "range (write a dotted quad or IPv6, a prefix in range, no host bits set below it)");
    /* every rule the fetch policy would refuse is refused here, with the line (not later, without one) */
    parse_err(
        "media {\n  media_fetch_allow 10.0.0.0/8;\n  media_fetch_allow 10.0.0.1/8;\n}\n",
        "t.conf:3: \"media_fetch_allow\" directive: invalid value \"10.0.0.1/8\": not an IP address or CIDR "
        "range (write a dotted quad or IPv6, a prefix in range, no host bits set below it)");
    parse_err(
        "media { media_fetch_allow fe80::1/10; }\n",
        "t.conf:1: \"media_fetch_allow\" directive: invalid value \"fe80::1/10\": not an IP address or CIDR "
        "range (write a dotted quad or IPv6, a prefix in range, no host bits set below it)");
    parse_err(
        "media { media_fetch_deny 10.0.0.0/08; }\n",
        "t.conf:1: \"media_fetch_deny\" directive: invalid value \"10.0.0.0/08\": not an IP address or CIDR "
        "range (write a dotted quad or IPv6, a prefix in range, no host bits set below it)");
    parse_err(
        "media { media_fetch_deny foo..example.com; }\n",
        "t.conf:1: \"media_fetch_deny\" directive: invalid value \"foo..example.com\": expected a host name, "
        "*.domain, a dotted-quad IP address or a CIDR range");
    parse_err("media { media_fetch_allow 0x7f.1; }\n",
              "t.conf:1: \"media_fetch_allow\" directive: invalid value \"0x7f.1\": expected a host name, "
              "*.domain, a dotted-quad IP address or a CIDR range");
    parse_err("media { media_fetch_allow *.; }\n",
              "t.conf:1: \"media_fetch_allow\" directive: invalid value \"*.\": expected a host name, "
              "*.domain, a dotted-quad IP address or a CIDR range");
    parse_err("http {\n  listen 127.0.0.1:1 ssl;\n}\n",
              "t.conf:2: \"listen 127.0.0.1:1 ssl\" needs \"ssl_certificate\" and \"ssl_certificate_key\"");
    parse_err("http {\n  listen 127.0.0.1:1;\n  listen 127.0.0.1:1;\n}\n",
              "t.conf:3: duplicate listen 127.0.0.1:1");
    /* syntax */
    parse_err("http {\n  listen 127.0.0.1:1\n}\n",
              "t.conf:2: directive \"listen\" is not terminated by \";\"");
    parse_err("http {\n  listen 127.0.0.1:1;\n", "t.conf:3: unexpected end of file, expecting \"}\"");
    parse_err("http { }\n}\n", "t.conf:2: unexpected \"}\"");
    parse_err("http { ; }\n", "t.conf:1: unexpected \";\"");
    parse_err("http;\n", "t.conf:1: directive \"http\" has no opening \"{\"");
    parse_err("http {\n  access_log on {\n}\n",
              "t.conf:2: directive \"access_log\" is not terminated by \";\"");
    parse_err("http {\n  listen \"127.0.0.1:1;\n}\n", "t.conf:2: unterminated quoted string");
    parse_err("http {\n  listen \"a\"b;\n}\n", "t.conf:2: unexpected \"b\" after a quoted string");
    parse_err("http {\n  include x.conf;\n}\n",
              "t.conf:2: \"include\" is not allowed here"); /* includes off */
    const char nul[] = "http {\n listen \0;\n}\n";
    struct gw_config *c = NULL;
    struct mm_err err;
    CHECK(gw_config_parse_text("t.conf", nul, sizeof nul - 1, NULL, false, &c, &err) != MM_OK);
    CHECK_STR(err.msg, "t.conf:2: unexpected NUL byte");
    /* '#' inside a word is part of it; a quoted '#' too */
    c = parse_ok("model m#1 { plugin \"#x\"; upstream h:1; }\n");
    if (c) {
        CHECK(gw_config_model(c, "m#1") && strcmp(gw_config_model(c, "m#1")->plugin, "#x") == 0);
        gw_config_unref(c);
    }
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_include(void)
{
    char dir[] = "/tmp/mmgw-conf-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char p[512], sub[512];
    snprintf(sub, sizeof sub, "%s/conf.d", dir);
    mkdir(sub, 0700);
    snprintf(p, sizeof p, "%s/conf.d/a.conf", dir);
    write_file(p, "model a { plugin m3; tokenizer t.json; upstream h:1; }\n");
    snprintf(p, sizeof p, "%s/conf.d/b.conf", dir);
    write_file(p, "model b { plugin m3; upstream h:2; }\n");
    snprintf(p, sizeof p, "%s/http.inc", dir);
    write_file(p, "listen 127.0.0.1:1;\nworker_threads 2;\n");
    snprintf(p, sizeof p, "%s/main.conf", dir);
    write_file(p, "http {\n include http.inc;\n}\ninclude conf.d/*.conf;\ninclude empty.d/*.conf;\n");
    struct gw_config *c = NULL;
    struct mm_err err;
    int32_t rc = gw_config_load(p, &c, &err);
    CHECK_MSG(rc == MM_OK, "%s", err.msg);
    if (c) {
        CHECK_EQ_INT(c->http.n_listen, 1);
        CHECK_EQ_INT(c->http.worker_threads, 2);
        CHECK_EQ_INT(c->n_models, 2); /* glob order */
        CHECK_STR(c->models[0].name, "a");
        CHECK_STR(c->models[1].name, "b");
        char want[600];
        snprintf(want, sizeof want, "%s/conf.d/t.json", dir); /* relative to the included file */
        CHECK_STR(c->models[0].tokenizer, want);
        gw_config_unref(c);
    }
    /* an error in an included file names it and its line */
    snprintf(p, sizeof p, "%s/conf.d/c.conf", dir);
    write_file(p, "\nmodel c {\n  plugin m3;\n  nope;\n}\n");
    snprintf(p, sizeof p, "%s/main.conf", dir);
    rc = gw_config_load(p, &c, &err);
    char want[700];
    snprintf(want, sizeof want, "%s/conf.d/c.conf:4: unknown directive \"nope\"", dir);
    CHECK(rc != MM_OK);
    CHECK_STR(err.msg, want);
    snprintf(p, sizeof p, "%s/conf.d/c.conf", dir);
    unlink(p);
    /* a missing plain file is an error at the include line */
    snprintf(p, sizeof p, "%s/m2.conf", dir);
    write_file(p, "http { listen 127.0.0.1:1; }\n\ninclude missing.conf;\n");
    rc = gw_config_load(p, &c, &err);
    CHECK(rc != MM_OK && strstr(err.msg, "m2.conf:3: cannot open") != NULL);
    /* a plain folder is an error at the include line (it used to include nothing, silently) */
    snprintf(p, sizeof p, "%s/m3.conf", dir);
    write_file(p, "http { listen 127.0.0.1:1; }\ninclude conf.d;\n");
    rc = gw_config_load(p, &c, &err);
    CHECK_MSG(rc != MM_OK && strstr(err.msg, "m3.conf:2: cannot include") != NULL &&
                  strstr(err.msg, "is a directory (include conf.d/*.conf?)") != NULL,
              "%s", err.msg);
    if (rc == MM_OK) gw_config_unref(c);
    /* an include loop stops at the nesting limit */
    snprintf(p, sizeof p, "%s/loop.conf", dir);
    write_file(p, "include loop.conf;\n");
    rc = gw_config_load(p, &c, &err);
    CHECK_MSG(rc != MM_OK && strstr(err.msg, "nested deeper") != NULL, "%s", err.msg);
    /* a missing main file */
    snprintf(p, sizeof p, "%s/none.conf", dir);
    rc = gw_config_load(p, &c, &err);
    CHECK(rc == MM_IO && strstr(err.msg, "none.conf: cannot open") != NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

static void test_docs(void)
{
    /* every directive is documented, with a default that its own setter accepts */
    size_t n = 0;
    for (size_t t = 0; gw_conf_tables[t]; t++)
        for (const struct gw_directive *d = gw_conf_tables[t]; d->name; d++) {
            CHECK_MSG(d->help && d->help[0], "%s has no help", d->name);
            CHECK_MSG(d->syntax != NULL, "%s has no syntax", d->name);
            n++;
        }
    CHECK(n >= 40);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    gw_conf_dump_markdown(f);
    fclose(f);
    CHECK(strstr(buf, "### client_max_body_size") && strstr(buf, "- Default: `64m`"));
    free(buf);
}

int main(void)
{
    test_full();
    test_defaults();
    test_values();
    test_errors();
    test_include();
    test_docs();
    return test_done();
}
