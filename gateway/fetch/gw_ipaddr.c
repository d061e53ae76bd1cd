/* IP address parsing (all URL spellings), CIDR ranges and classification for the fetch policy. */
#include "gw_ipaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "mm_text.h"

const char *gw_addr_class_name(enum gw_addr_class c)
{
    switch (c) {
    case GW_ADDR_GLOBAL:
        return "global";
    case GW_ADDR_LOOPBACK:
        return "loopback";
    case GW_ADDR_PRIVATE:
        return "private";
    case GW_ADDR_LINK_LOCAL:
        return "link-local";
    case GW_ADDR_CGNAT:
        return "carrier-grade NAT";
    case GW_ADDR_MULTICAST:
        return "multicast";
    case GW_ADDR_UNSPECIFIED:
        return "unspecified";
    case GW_ADDR_BROADCAST:
        return "broadcast";
    case GW_ADDR_METADATA:
        return "cloud metadata";
    case GW_ADDR_RESERVED:
        return "reserved";
    }
    return "unknown";
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* One IPv4 part in WHATWG/inet_aton form. Returns 0 and the value (saturated past 2^32), or -1 when the
 * part is not a number in its base. */
static int parse_v4_part(const char *s, size_t len, uint64_t *val)
{
    unsigned base = 10;
    if (len >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        len -= 2;
    } else if (len >= 2 && s[0] == '0') {
        base = 8;
        s++;
        len--;
    }
    if (len == 0 && base != 16) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        int d = base == 16 ? mm_hex_digit(s[i]) : (is_digit(s[i]) ? s[i] - '0' : -1);
        if (d < 0 || (unsigned)d >= base) return -1;
        v = v * base + (unsigned)d;
        if (v > 0xffffffffull) v = 0x100000000ull; /* saturate: any larger value is just "too big" */
    }
    *val = v;
    return 0;
}

/* Whether a label "ends in a number" in the WHATWG sense: all decimal digits, or 0x followed by hex. */
static int label_is_numeric(const char *s, size_t len)
{
    if (len == 0) return 0;
    if (len >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        for (size_t i = 2; i < len; i++)
            if (mm_hex_digit(s[i]) < 0) return 0;
        return 1;
    }
    for (size_t i = 0; i < len; i++)
        if (!is_digit(s[i])) return 0;
    return 1;
}

/* 1: IPv4 literal, 0: a name, -1: numeric-looking but invalid. */
static int parse_v4_host(const char *s, size_t len, struct gw_ipaddr *out)
{
    if (len > 0 && s[len - 1] == '.') len--; /* one trailing dot is allowed */
    if (len == 0) return 0;
    /* the last label decides whether this is an IPv4 host at all */
    size_t last = len;
    while (last > 0 && s[last - 1] != '.') last--;
    if (!label_is_numeric(s + last, len - last)) return 0;

    uint64_t parts[4];
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '.') {
            if (n == 4) return -1;
            if (parse_v4_part(s + start, i - start, &parts[n]) != 0) return -1;
            n++;
            start = i + 1;
        }
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (parts[i] > 255) return -1;
    uint64_t limit = 1ull << (8 * (5 - n));
    if (parts[n - 1] >= limit) return -1;
    uint64_t v = parts[n - 1];
    for (size_t i = 0; i + 1 < n; i++) v += parts[i] << (8 * (3 - i));
    memset(out, 0, sizeof(*out));
    out->family = 4;
    out->bytes[0] = (uint8_t)(v >> 24);
    out->bytes[1] = (uint8_t)(v >> 16);
    out->bytes[2] = (uint8_t)(v >> 8);
    out->bytes[3] = (uint8_t)v;
    return 1;
}

/* IPv6 text (no brackets, optional zone id) via inet_pton. */
static int parse_v6(const char *s, size_t len, struct gw_ipaddr *out, int allow_zone)
{
    char tmp[64];
    size_t n = len;
    const char *pct = memchr(s, '%', len);
    if (pct) {
        if (!allow_zone) return -1;
        n = (size_t)(pct - s);
        if (n == len - 1) return -1; /* empty zone id */
    }
    if (n == 0 || n >= sizeof(tmp)) return -1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    struct in6_addr a6;
    if (inet_pton(AF_INET6, tmp, &a6) != 1) return -1;
    memset(out, 0, sizeof(*out));
    out->family = 6;
    memcpy(out->bytes, &a6, 16);
    return 0;
}

int gw_ipaddr_parse_host(const char *host, size_t len, struct gw_ipaddr *out)
{
    if (!host || len == 0) return -1;
    if (host[0] == '[') {
        if (len < 3 || host[len - 1] != ']') return -1;
        return parse_v6(host + 1, len - 2, out, 1) == 0 ? 1 : -1;
    }
    if (memchr(host, ':', len)) return parse_v6(host, len, out, 1) == 0 ? 1 : -1;
    return parse_v4_host(host, len, out);
}

int gw_ipaddr_parse_strict(const char *s, size_t len, struct gw_ipaddr *out)
{
    if (!s || len == 0) return -1;
    if (s[0] == '[') {
        if (len < 3 || s[len - 1] != ']') return -1;
        return parse_v6(s + 1, len - 2, out, 0);
    }
    if (memchr(s, ':', len)) return parse_v6(s, len, out, 0);
    char tmp[16];
    if (len >= sizeof(tmp)) return -1;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    struct in_addr a4;
    if (inet_pton(AF_INET, tmp, &a4) != 1) return -1; /* dotted quad, decimal only */
    memset(out, 0, sizeof(*out));
    out->family = 4;
    memcpy(out->bytes, &a4, 4);
    return 0;
}

int gw_ipaddr_from_sockaddr(const struct sockaddr *sa, struct gw_ipaddr *out)
{
    if (!sa) return -1;
    memset(out, 0, sizeof(*out));
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        out->family = 4;
        memcpy(out->bytes, &in->sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        out->family = 6;
        memcpy(out->bytes, &in6->sin6_addr, 16);
        return 0;
    }
    return -1;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static void v4_from(struct gw_ipaddr *v4, const uint8_t *p)
{
    memset(v4, 0, sizeof(*v4));
    v4->family = 4;
    memcpy(v4->bytes, p, 4);
}

int gw_ipaddr_embedded_v4(const struct gw_ipaddr *addr, struct gw_ipaddr *v4)
{
    const uint8_t *b = addr->bytes;
    if (addr->family != 6) return 0;
    /* ::ffff:a.b.c.d (mapped) */
    if (all_zero(b, 10) && b[10] == 0xff && b[11] == 0xff) {
        v4_from(v4, b + 12);
        return 1;
    }
    /* ::ffff:0:a.b.c.d (SIIT IPv4-translated) */
    if (all_zero(b, 8) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0) {
        v4_from(v4, b + 12);
        return 1;
    }
    /* ::a.b.c.d (compatible); :: and ::1 are handled as themselves by the classifier */
    if (all_zero(b, 12)) {
        v4_from(v4, b + 12);
        return 1;
    }
    /* 64:ff9b::a.b.c.d (NAT64 well-known prefix, RFC 6052) */
    static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (memcmp(b, nat64, 12) == 0) {
        v4_from(v4, b + 12);
        return 1;
    }
    /* 2002:aabb:ccdd::/48 (6to4) */
    if (b[0] == 0x20 && b[1] == 0x02) {
        v4_from(v4, b + 2);
        return 1;
    }
    return 0;
}

static int in_v4(const uint8_t *b, uint8_t a0, uint8_t a1, uint8_t a2, uint8_t a3, unsigned prefix)
{
    uint32_t x = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    uint32_t n = (uint32_t)a0 << 24 | (uint32_t)a1 << 16 | (uint32_t)a2 << 8 | a3;
    uint32_t mask = prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
    return (x & mask) == (n & mask);
}

static enum gw_addr_class classify_v4(const uint8_t *b)
{
    /* metadata first: some of these sit inside ranges refused anyway, but the reason should name it */
    if (in_v4(b, 169, 254, 169, 254, 32) || in_v4(b, 169, 254, 170, 2, 32) ||
        in_v4(b, 169, 254, 170, 23, 32) || in_v4(b, 100, 100, 100, 200, 32) || in_v4(b, 168, 63, 129, 16, 32))
        return GW_ADDR_METADATA;
    if (in_v4(b, 0, 0, 0, 0, 8)) return GW_ADDR_UNSPECIFIED;
    if (in_v4(b, 127, 0, 0, 0, 8)) return GW_ADDR_LOOPBACK;
    if (in_v4(b, 10, 0, 0, 0, 8) || in_v4(b, 172, 16, 0, 0, 12) || in_v4(b, 192, 168, 0, 0, 16))
        return GW_ADDR_PRIVATE;
    if (in_v4(b, 100, 64, 0, 0, 10)) return GW_ADDR_CGNAT;
    if (in_v4(b, 169, 254, 0, 0, 16)) return GW_ADDR_LINK_LOCAL;
    if (in_v4(b, 255, 255, 255, 255, 32)) return GW_ADDR_BROADCAST;
    if (in_v4(b, 224, 0, 0, 0, 4)) return GW_ADDR_MULTICAST;
    if (in_v4(b, 240, 0, 0, 0, 4) || in_v4(b, 192, 0, 0, 0, 24) || in_v4(b, 192, 0, 2, 0, 24) ||
        in_v4(b, 192, 88, 99, 0, 24) || in_v4(b, 198, 18, 0, 0, 15) || in_v4(b, 198, 51, 100, 0, 24) ||
        in_v4(b, 203, 0, 113, 0, 24))
        return GW_ADDR_RESERVED;
    return GW_ADDR_GLOBAL;
}

static int in_v6(const uint8_t *b, const uint8_t *net, unsigned prefix)
{
    unsigned full = prefix / 8, rest = prefix % 8;
    if (memcmp(b, net, full) != 0) return 0;
    if (rest == 0) return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (b[full] & mask) == (net[full] & mask);
}

static enum gw_addr_class classify_v6(const uint8_t *b)
{
    static const uint8_t aws_md[16] = {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54};
    static const uint8_t aws_pod[16] = {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x23};
    static const uint8_t gcp_md[16] = {0xfd, 0x20, 0x00, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54};
    static const uint8_t nat64_local[16] = {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01};
    static const uint8_t discard[16] = {0x01, 0x00, 0, 0, 0, 0, 0, 0};
    static const uint8_t doc[16] = {0x20, 0x01, 0x0d, 0xb8};
    static const uint8_t doc2[16] = {0x3f, 0xff};
    static const uint8_t ietf[16] = {0x20, 0x01};
    static const uint8_t srv6[16] = {0x5f, 0x00};

    if (memcmp(b, aws_md, 16) == 0 || memcmp(b, aws_pod, 16) == 0 || memcmp(b, gcp_md, 16) == 0)
        return GW_ADDR_METADATA;
    if (all_zero(b, 16)) return GW_ADDR_UNSPECIFIED;
    if (all_zero(b, 15) && b[15] == 1) return GW_ADDR_LOOPBACK;
    if ((b[0] & 0xfe) == 0xfc) return GW_ADDR_PRIVATE;                    /* fc00::/7 */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return GW_ADDR_LINK_LOCAL; /* fe80::/10 */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return GW_ADDR_PRIVATE;    /* fec0::/10 site-local */
    if (b[0] == 0xff) return GW_ADDR_MULTICAST;
    if (in_v6(b, nat64_local, 48)) return GW_ADDR_PRIVATE;
    if (in_v6(b, discard, 64) || in_v6(b, doc, 32) || in_v6(b, doc2, 20) || in_v6(b, ietf, 23) ||
        in_v6(b, srv6, 16))
        return GW_ADDR_RESERVED;                        /* 2001::/23 holds Teredo, benchmarking and ORCHID */
    if ((b[0] & 0xe0) != 0x20) return GW_ADDR_RESERVED; /* only 2000::/3 is global unicast */
    return GW_ADDR_GLOBAL;
}

enum gw_addr_class gw_ipaddr_classify(const struct gw_ipaddr *addr)
{
    if (addr->family == 4) return classify_v4(addr->bytes);
    if (addr->family != 6) return GW_ADDR_RESERVED;
    enum gw_addr_class c6 = classify_v6(addr->bytes);
    if (c6 == GW_ADDR_UNSPECIFIED || c6 == GW_ADDR_LOOPBACK) return c6;
    struct gw_ipaddr v4;
    if (gw_ipaddr_embedded_v4(addr, &v4)) {
        enum gw_addr_class c4 = classify_v4(v4.bytes);
        /* the embedding prefixes themselves sit in reserved space: the carried address decides */
        return c4;
    }
    return c6;
}

char *gw_ipaddr_format(const struct gw_ipaddr *addr, char *buf, size_t size)
{
    if (!buf || size == 0) return buf;
    if (!inet_ntop(addr->family == 4 ? AF_INET : AF_INET6, addr->bytes, buf, (socklen_t)size))
        snprintf(buf, size, "?");
    return buf;
}

int gw_cidr_parse(const char *s, size_t len, struct gw_cidr *out)
{
    if (!s || len == 0) return -1;
    const char *slash = memchr(s, '/', len);
    size_t alen = slash ? (size_t)(slash - s) : len;
    memset(out, 0, sizeof(*out));
    if (gw_ipaddr_parse_strict(s, alen, &out->net) != 0) return -1;
    unsigned max = out->net.family == 4 ? 32 : 128;
    unsigned prefix = max;
    if (slash) {
        const char *p = slash + 1;
        size_t plen = len - alen - 1;
        if (plen == 0 || plen > 3) return -1;
        prefix = 0;
        for (size_t i = 0; i < plen; i++) {
            if (!is_digit(p[i])) return -1;
            prefix = prefix * 10 + (unsigned)(p[i] - '0');
        }
        if (plen > 1 && p[0] == '0') return -1;
        if (prefix > max) return -1;
    }
    out->prefix = (uint8_t)prefix;
    /* refuse host bits below the prefix */
    for (unsigned bit = prefix; bit < max; bit++)
        if (out->net.bytes[bit / 8] & (0x80 >> (bit % 8))) return -1;
    return 0;
}

static int cidr_match_same_family(const struct gw_cidr *r, const struct gw_ipaddr *a)
{
    if (r->net.family == 4)
        return in_v4(a->bytes, r->net.bytes[0], r->net.bytes[1], r->net.bytes[2], r->net.bytes[3], r->prefix);
    return in_v6(a->bytes, r->net.bytes, r->prefix);
}

int gw_cidr_contains(const struct gw_cidr *range, const struct gw_ipaddr *addr)
{
    if (range->net.family == addr->family) return cidr_match_same_family(range, addr);
    struct gw_ipaddr v4;
    if (range->net.family == 4 && gw_ipaddr_embedded_v4(addr, &v4)) return cidr_match_same_family(range, &v4);
    return 0;
}
