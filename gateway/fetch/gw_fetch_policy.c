/* The media-fetch policy: URL and address checks, allow/deny rules (see gw_fetch_policy.h). */
#include "gw_fetch_policy.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

enum rule_kind { RULE_NAME, RULE_SUFFIX, RULE_CIDR };

struct rule {
    enum rule_kind kind;
    char name[256]; /* RULE_NAME: the host; RULE_SUFFIX: ".example.com" */
    struct gw_cidr cidr;
    char text[128]; /* as written, for messages */
};

struct gw_fetch_policy {
    struct rule *allow;
    size_t n_allow;
    struct rule *deny;
    size_t n_deny;
};

/* Names that only ever mean something on the local machine or network. Single-label names are refused
 * too (they resolve through the resolver's search domains to internal hosts). */
static const char *const local_suffixes[] = {".localhost",   ".local",     ".internal",
                                             ".localdomain", ".home.arpa", ".lan",
                                             ".intranet",    ".corp",      ".private"};

static const struct gw_fetch_policy default_policy;

static char lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* Normalise a host name into out (lower-case, one trailing dot dropped) and check its syntax: labels of
 * letters, digits, '-' and '_', 1..63 bytes, 253 in all. Returns 0 or -1. */
static int normalize_name(const char *s, size_t len, char *out, size_t cap)
{
    if (len > 0 && s[len - 1] == '.') len--;
    if (len == 0 || len > 253 || len >= cap) return -1;
    size_t label = 0;
    for (size_t i = 0; i < len; i++) {
        char c = lower(s[i]);
        if (c == '.') {
            if (label == 0) return -1;
            label = 0;
        } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_') {
            if (++label > 63) return -1;
        } else {
            return -1;
        }
        out[i] = c;
    }
    if (label == 0) return -1;
    out[len] = '\0';
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && memcmp(s + n - m, suffix, m) == 0;
}

static int32_t parse_rule(const char *text, struct rule *r, struct mm_err *err)
{
    memset(r, 0, sizeof(*r));
    if (!text || !text[0]) return mm_err_set(err, MM_INVALID, "media fetch rule is empty");
    size_t len = strlen(text);
    if (len >= sizeof(r->text))
        return mm_err_set(err, MM_INVALID, "media fetch rule '%.40s...' is too long", text);
    memcpy(r->text, text, len + 1);
    if (gw_cidr_parse(text, len, &r->cidr) == 0) {
        r->kind = RULE_CIDR;
        return MM_OK;
    }
    if (memchr(text, '/', len) || memchr(text, ':', len))
        return mm_err_set(
            err, MM_INVALID,
            "media fetch rule '%s' is not a valid address range (host bits set, or a bad prefix?)", text);
    if (len > 2 && text[0] == '*' && text[1] == '.') {
        r->kind = RULE_SUFFIX;
        r->name[0] = '.';
        if (normalize_name(text + 2, len - 2, r->name + 1, sizeof(r->name) - 1) != 0)
            return mm_err_set(err, MM_INVALID, "media fetch rule '%s' is not a valid wildcard name", text);
        return MM_OK;
    }
    r->kind = RULE_NAME;
    if (normalize_name(text, len, r->name, sizeof(r->name)) != 0)
        return mm_err_set(err, MM_INVALID,
                          "media fetch rule '%s' is not a host name, wildcard or address range", text);
    struct gw_ipaddr ip;
    if (gw_ipaddr_parse_host(r->name, strlen(r->name), &ip) != 0)
        return mm_err_set(err, MM_INVALID, "media fetch rule '%s': write addresses as a dotted quad", text);
    return MM_OK;
}

int32_t gw_fetch_rule_check(const char *rule, struct mm_err *err)
{
    struct rule r;
    return parse_rule(rule, &r, err);
}

static int32_t parse_rules(const char *const *texts, size_t n, struct rule **out, struct mm_err *err)
{
    *out = NULL;
    if (n == 0) return MM_OK;
    struct rule *rules = calloc(n, sizeof(*rules));
    if (!rules) return mm_err_set(err, MM_NOMEM, "media fetch rules: out of memory");
    for (size_t i = 0; i < n; i++) {
        int32_t rc = parse_rule(texts[i], &rules[i], err);
        if (rc != MM_OK) {
            free(rules);
            return rc;
        }
    }
    *out = rules;
    return MM_OK;
}

int32_t gw_fetch_policy_create(const char *const *allow, size_t n_allow, const char *const *deny,
                               size_t n_deny, struct gw_fetch_policy **out, struct mm_err *err)
{
    *out = NULL;
    struct gw_fetch_policy *p = calloc(1, sizeof(*p));
    if (!p) return mm_err_set(err, MM_NOMEM, "media fetch policy: out of memory");
    int32_t rc = parse_rules(allow, n_allow, &p->allow, err);
    if (rc == MM_OK) rc = parse_rules(deny, n_deny, &p->deny, err);
    if (rc != MM_OK) {
        if (err) mm_err_prefix(err, "%s", rc == MM_NOMEM ? "media fetch" : "media_fetch_allow/deny");
        gw_fetch_policy_destroy(p);
        return rc;
    }
    p->n_allow = n_allow;
    p->n_deny = n_deny;
    *out = p;
    return MM_OK;
}

void gw_fetch_policy_destroy(struct gw_fetch_policy *p)
{
    if (!p) return;
    free(p->allow);
    free(p->deny);
    free(p);
}

static const struct rule *match_name(const struct rule *rules, size_t n, const char *host)
{
    for (size_t i = 0; i < n; i++) {
        if (rules[i].kind == RULE_NAME && strcmp(rules[i].name, host) == 0) return &rules[i];
        if (rules[i].kind == RULE_SUFFIX && ends_with(host, rules[i].name)) return &rules[i];
    }
    return NULL;
}

static const char *local_name_reason(const char *host)
{
    if (!strchr(host, '.')) return "a single-label name (resolved through local search domains)";
    for (size_t i = 0; i < sizeof(local_suffixes) / sizeof(local_suffixes[0]); i++)
        if (ends_with(host, local_suffixes[i])) return "a local-network name";
    return NULL;
}

int32_t gw_fetch_policy_check_addr(const struct gw_fetch_policy *p, const struct gw_fetch_target *t,
                                   const struct gw_ipaddr *addr, struct mm_err *err)
{
    char ab[64];
    if (!p) p = &default_policy;
    for (size_t i = 0; i < p->n_deny; i++)
        if (p->deny[i].kind == RULE_CIDR && gw_cidr_contains(&p->deny[i].cidr, addr))
            return mm_err_set(err, MM_DENIED,
                              "media URL host '%s' (address %s) is refused by media_fetch_deny '%s'", t->host,
                              gw_ipaddr_format(addr, ab, sizeof(ab)), p->deny[i].text);
    enum gw_addr_class cls = gw_ipaddr_classify(addr);
    for (size_t i = 0; i < p->n_allow; i++) {
        const struct rule *r = &p->allow[i];
        if (r->kind != RULE_CIDR || !gw_cidr_contains(&r->cidr, addr)) continue;
        /* a metadata endpoint opens only to a rule naming exactly that address */
        if (cls == GW_ADDR_METADATA && r->cidr.prefix != (r->cidr.net.family == 4 ? 32 : 128)) continue;
        return MM_OK;
    }
    if (t->host_allowed && cls != GW_ADDR_METADATA) return MM_OK;
    if (cls == GW_ADDR_GLOBAL) return MM_OK;
    return mm_err_set(
        err, MM_DENIED,
        "media URL host '%s' resolves to %s, a %s address; only public addresses may be fetched "
        "(see media_fetch_allow)",
        t->host, gw_ipaddr_format(addr, ab, sizeof(ab)), gw_addr_class_name(cls));
}

/* The scheme as written (before ':'), lower-cased into out. Returns 0, or -1 when there is none. */
static int url_scheme(const char *url, char *out, size_t cap)
{
    size_t i = 0;
    for (; url[i] && url[i] != ':'; i++) {
        char c = lower(url[i]);
        int ok =
            (c >= 'a' && c <= 'z') || (i > 0 && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'));
        if (!ok || i + 1 >= cap) return -1;
        out[i] = c;
    }
    if (url[i] != ':' || i == 0) return -1;
    out[i] = '\0';
    return 0;
}

static int32_t check_host(const struct gw_fetch_policy *p, const char *raw, struct gw_fetch_target *t,
                          struct mm_err *err)
{
    size_t len = strlen(raw);
    if (raw[0] == '[') {
        if (len < 3 || raw[len - 1] != ']' || gw_ipaddr_parse_strict(raw + 1, len - 2, &t->ip) != 0)
            return mm_err_set(err, MM_INVALID, "media URL host '%.200s' is not a valid IPv6 address", raw);
        if (len - 2 >= sizeof(t->host)) return mm_err_set(err, MM_INVALID, "media URL host is too long");
        memcpy(t->host, raw + 1, len - 2);
        t->host[len - 2] = '\0';
        t->host_is_ip = 1;
        return gw_fetch_policy_check_addr(p, t, &t->ip, err);
    }
    int ip = gw_ipaddr_parse_host(raw, len, &t->ip);
    if (ip < 0)
        return mm_err_set(err, MM_INVALID,
                          "media URL host '%.200s' looks numeric but is not a valid IPv4 address", raw);
    if (ip == 1) {
        gw_ipaddr_format(&t->ip, t->host, sizeof(t->host));
        t->host_is_ip = 1;
        return gw_fetch_policy_check_addr(p, t, &t->ip, err);
    }
    if (normalize_name(raw, len, t->host, sizeof(t->host)) != 0)
        return mm_err_set(err, MM_INVALID, "media URL host '%.200s' is not a valid host name", raw);
    const struct rule *r = match_name(p->deny, p->n_deny, t->host);
    if (r)
        return mm_err_set(err, MM_DENIED, "media URL host '%s' is refused by media_fetch_deny '%s'", t->host,
                          r->text);
    if (match_name(p->allow, p->n_allow, t->host)) {
        t->host_allowed = 1;
        return MM_OK;
    }
    const char *why = local_name_reason(t->host);
    if (why)
        return mm_err_set(err, MM_DENIED,
                          "media URL host '%s' is %s; only public hosts may be fetched "
                          "(see media_fetch_allow)",
                          t->host, why);
    return MM_OK;
}

static int has_non_ascii(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return 1;
    return 0;
}

int32_t gw_fetch_policy_parse_url(const struct gw_fetch_policy *p, const char *url, struct Curl_URL **out,
                                  struct gw_fetch_target *t, struct mm_err *err)
{
    *out = NULL;
    memset(t, 0, sizeof(*t));
    if (!p) p = &default_policy;
    if (!url || !url[0]) return mm_err_set(err, MM_INVALID, "media URL is empty");
    size_t len = strnlen(url, GW_FETCH_MAX_URL + 1);
    if (len > GW_FETCH_MAX_URL)
        return mm_err_set(err, MM_INVALID, "media URL is longer than %d bytes", GW_FETCH_MAX_URL);
    char scheme[16];
    if (url_scheme(url, scheme, sizeof(scheme)) != 0)
        return mm_err_set(err, MM_INVALID, "media URL has no scheme (http or https expected)");
    if (strcmp(scheme, "data") == 0)
        return mm_err_set(err, MM_INVALID, "data: URLs are decoded by the media pipeline, not fetched");
    if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
        return mm_err_set(err, MM_DENIED, "media URL scheme '%s' is not allowed (http and https only)",
                          scheme);
    memcpy(t->scheme, scheme, strlen(scheme) + 1);

    CURLU *u = curl_url();
    if (!u) return mm_err_set(err, MM_NOMEM, "media URL: out of memory");
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, url, 0);
    if (uc != CURLUE_OK) {
        curl_url_cleanup(u);
        return mm_err_set(err, MM_INVALID, "malformed media URL: %s", curl_url_strerror(uc));
    }
    char *host = NULL, *port = NULL;
    int32_t rc = MM_OK;
    if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host || !host[0]) {
        rc = mm_err_set(err, MM_INVALID, "media URL has no host");
        goto done;
    }
    if (has_non_ascii(host)) {
        /* judge an international name by the ASCII form that will be resolved */
        char *puny = NULL;
        if (curl_url_get(u, CURLUPART_HOST, &puny, CURLU_PUNYCODE) != CURLUE_OK || !puny ||
            has_non_ascii(puny)) {
            curl_free(puny);
            rc = mm_err_set(err, MM_INVALID,
                            "media URL host is an international name that cannot be converted");
            goto done;
        }
        curl_free(host);
        host = puny;
    }
    if (curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK || !port) {
        rc = mm_err_set(err, MM_INVALID, "media URL has no port");
        goto done;
    }
    long pn = strtol(port, NULL, 10);
    if (pn <= 0 || pn > 65535) {
        rc = mm_err_set(err, MM_INVALID, "media URL port %s is not valid", port);
        goto done;
    }
    t->port = (uint16_t)pn;
    rc = check_host(p, host, t, err);
done:
    curl_free(host);
    curl_free(port);
    if (rc == MM_OK)
        *out = u;
    else
        curl_url_cleanup(u);
    return rc;
}

int32_t gw_fetch_policy_check_url(const struct gw_fetch_policy *p, const char *url, struct gw_fetch_target *t,
                                  struct mm_err *err)
{
    struct Curl_URL *u = NULL;
    int32_t rc = gw_fetch_policy_parse_url(p, url, &u, t, err);
    curl_url_cleanup(u);
    return rc;
}
