/* The media-fetch policy: which URLs a stranger may make the gateway fetch.
 *
 * Decided in two steps, both before any byte is sent:
 *   1. gw_fetch_policy_check_url() on the URL: scheme http or https only (data: URLs are decoded by the
 *      media pipeline, never fetched), a well-formed host, then the host itself: an IP literal in any
 *      spelling is classified right away; a name is refused when it is local by construction
 *      (`localhost`, `*.localhost`, single-label names, `*.local`, `*.internal` — which holds
 *      metadata.google.internal —, `*.localdomain`, `*.home.arpa`).
 *   2. gw_fetch_policy_check_addr() on every address the fetcher is about to connect to (called from
 *      libcurl's open-socket hook, so what is checked is exactly what is connected to: no DNS rebinding).
 *      By default only global unicast addresses pass: loopback, private, link-local, CGNAT, multicast,
 *      unspecified, broadcast, reserved and cloud-metadata addresses are refused, IPv6 forms that
 *      carry an IPv4 address (mapped, compatible, NAT64, 6to4) are judged by that address.
 *
 * Rules (config `media_fetch_allow` / `media_fetch_deny`): a host name (`cdn.example.com`, exact,
 * case-insensitive), a wildcard (`*.example.com`: any name below example.com, not example.com itself),
 * an IP address or a CIDR range, IPv4 or IPv6 (`10.0.0.0/8`, `fd00::/8`, `[::1]`). Deny wins over
 * allow and over everything else. An allowed name may resolve to any address except a cloud-metadata
 * one; an allowed range opens its addresses, and a metadata address only opens when a rule names that
 * exact address (a /32 or /128), so `allow 169.254.0.0/16` does not expose instance credentials.
 *
 * A compiled policy is immutable and may be shared by every thread. */
#ifndef GW_FETCH_POLICY_H
#define GW_FETCH_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "gw_ipaddr.h"
#include "mm_status.h"

struct gw_fetch_policy;

/** Longest URL accepted (bytes). */
#define GW_FETCH_MAX_URL 8192

/** Compile rule lists (either may be empty). Errors name the rule. */
int32_t gw_fetch_policy_create(const char *const *allow, size_t n_allow, const char *const *deny,
                               size_t n_deny, struct gw_fetch_policy **out, struct mm_err *err);
void gw_fetch_policy_destroy(struct gw_fetch_policy *p);

/** Check one rule's syntax (for `mmgw -t`). */
int32_t gw_fetch_rule_check(const char *rule, struct mm_err *err);

/** What check_url learned about a URL, for the connect-time check. */
struct gw_fetch_target {
    char scheme[8]; /* "http" or "https" */
    char host[256]; /* lower-case, no trailing dot, IPv6 without brackets */
    uint16_t port;
    uint8_t host_is_ip;
    uint8_t host_allowed; /* the name matched an allow rule */
    struct gw_ipaddr ip;  /* when host_is_ip */
};

/** Check a URL. MM_OK fills target; MM_DENIED (refused by policy) or MM_INVALID (malformed) come with a
 * message saying why, meant for the client (the API returns it as a 400). */
int32_t gw_fetch_policy_check_url(const struct gw_fetch_policy *p, const char *url,
                                  struct gw_fetch_target *target, struct mm_err *err);

struct Curl_URL;

/** Like gw_fetch_policy_check_url, and hand back the parsed URL (libcurl's CURLU, free with
 * curl_url_cleanup) so the transfer uses exactly the host that was checked (CURLOPT_CURLU). *out is
 * NULL on failure. */
int32_t gw_fetch_policy_parse_url(const struct gw_fetch_policy *p, const char *url, struct Curl_URL **out,
                                  struct gw_fetch_target *target, struct mm_err *err);

/** Check an address the fetcher is about to connect to for target. MM_OK or MM_DENIED with a message. */
int32_t gw_fetch_policy_check_addr(const struct gw_fetch_policy *p, const struct gw_fetch_target *target,
                                   const struct gw_ipaddr *addr, struct mm_err *err);

#endif
