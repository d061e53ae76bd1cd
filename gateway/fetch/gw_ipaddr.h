/* IP addresses for the media-fetch policy: parsing every spelling a URL host can take, CIDR ranges,
 * and the classification that decides which addresses a stranger's URL may reach.
 *
 * IPv4 hosts are parsed the way browsers and libc's inet_aton do (WHATWG URL "IPv4 parser"): one to
 * four dot-separated parts, each decimal, hex (0x) or octal (leading 0), the last part filling the
 * remaining bytes, so `2130706433`, `0x7f000001`, `0177.0.0.1` and `127.1` are all 127.0.0.1. A host
 * whose last label is numeric but is not a valid IPv4 address (`1.2.3.256`) is malformed, never a
 * name to resolve. IPv6 hosts may carry brackets and a zone id. */
#ifndef GW_IPADDR_H
#define GW_IPADDR_H

#include <stddef.h>
#include <stdint.h>

struct sockaddr;

struct gw_ipaddr {
    uint8_t family;    /* 4 or 6 */
    uint8_t bytes[16]; /* network order; IPv4 uses bytes[0..4) */
};

/** What an address is, for the policy. Everything but GW_ADDR_GLOBAL is refused by default. */
enum gw_addr_class {
    GW_ADDR_GLOBAL = 0,
    GW_ADDR_LOOPBACK,
    GW_ADDR_PRIVATE,     /* RFC 1918, IPv6 ULA fc00::/7, site-local fec0::/10, local-use NAT64 */
    GW_ADDR_LINK_LOCAL,  /* 169.254/16, fe80::/10 */
    GW_ADDR_CGNAT,       /* 100.64/10 shared address space */
    GW_ADDR_MULTICAST,   /* 224/4, ff00::/8 */
    GW_ADDR_UNSPECIFIED, /* 0/8 "this network", :: */
    GW_ADDR_BROADCAST,   /* 255.255.255.255 */
    GW_ADDR_METADATA,    /* cloud instance-metadata endpoints */
    GW_ADDR_RESERVED,    /* documentation, benchmarking, 240/4, IETF protocol, discard, Teredo... */
};

/** Short lower-case name of a class ("loopback", "private", ...). */
const char *gw_addr_class_name(enum gw_addr_class c);

/** Parse a URL host (as it appears between "//" and the port; brackets and zone ids accepted for
 * IPv6). Returns 1 and fills out when host is an IP literal, 0 when it is a name, -1 when it looks
 * numeric but is not a valid address (to be refused, never resolved). */
int gw_ipaddr_parse_host(const char *host, size_t len, struct gw_ipaddr *out);

/** Parse a strict dotted-quad IPv4 or an IPv6 address (no legacy forms; for config rules). Returns 0
 * or -1. */
int gw_ipaddr_parse_strict(const char *s, size_t len, struct gw_ipaddr *out);

/** Fill out from a socket address (AF_INET or AF_INET6). Returns 0, or -1 for other families. */
int gw_ipaddr_from_sockaddr(const struct sockaddr *sa, struct gw_ipaddr *out);

/** The IPv4 address an IPv6 address carries and that decides where packets go: IPv4-mapped
 * (::ffff:0:0/96), IPv4-compatible (::/96, deprecated), NAT64 well-known prefix (64:ff9b::/96) and
 * 6to4 (2002::/16). Returns 1 and fills v4, or 0 when addr carries none. */
int gw_ipaddr_embedded_v4(const struct gw_ipaddr *addr, struct gw_ipaddr *v4);

/** Classify an address; for IPv6 with an embedded IPv4 address, the embedded one decides (the worst
 * of the two classes wins). */
enum gw_addr_class gw_ipaddr_classify(const struct gw_ipaddr *addr);

/** Text form (dotted quad or RFC 5952 IPv6) into buf (at least 46 bytes). Returns buf. */
char *gw_ipaddr_format(const struct gw_ipaddr *addr, char *buf, size_t size);

/** An address range: family, network bytes and prefix length. */
struct gw_cidr {
    struct gw_ipaddr net;
    uint8_t prefix; /* 0..32 or 0..128 */
};

/** Parse "a.b.c.d/n", "x::/n", or a single strict address (a full-length prefix). Host bits set below
 * the prefix are refused ("10.0.0.1/8" is almost certainly a typo). Brackets around IPv6 accepted.
 * Returns 0 or -1. */
int gw_cidr_parse(const char *s, size_t len, struct gw_cidr *out);

/** Whether addr lies in range. An IPv4 range also matches IPv4-mapped/compatible/NAT64/6to4 IPv6
 * addresses that embed an address inside it. */
int gw_cidr_contains(const struct gw_cidr *range, const struct gw_ipaddr *addr);

#endif
