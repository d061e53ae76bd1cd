/* Address parsing in every URL spelling, CIDR ranges and the classifier. Pure functions: no network. */
#include "gw_ipaddr.h"
#include "mmgw_test.h"

static int host_is(const char *host, const char *want)
{
    struct gw_ipaddr a;
    char buf[64];
    if (gw_ipaddr_parse_host(host, strlen(host), &a) != 1) {
        fprintf(stderr, "  '%s' did not parse as an address\n", host);
        return 0;
    }
    gw_ipaddr_format(&a, buf, sizeof(buf));
    if (strcmp(buf, want) != 0) fprintf(stderr, "  '%s' -> %s, want %s\n", host, buf, want);
    return strcmp(buf, want) == 0;
}

static int parse_rc(const char *host)
{
    struct gw_ipaddr a;
    return gw_ipaddr_parse_host(host, strlen(host), &a);
}

static enum gw_addr_class cls(const char *text)
{
    struct gw_ipaddr a;
    if (gw_ipaddr_parse_strict(text, strlen(text), &a) != 0) {
        fprintf(stderr, "  '%s' is not a strict address\n", text);
        return (enum gw_addr_class) - 1;
    }
    return gw_ipaddr_classify(&a);
}

static void test_spellings(void)
{
    /* every legacy IPv4 spelling of loopback that browsers and inet_aton accept */
    CHECK(host_is("127.0.0.1", "127.0.0.1"));
    CHECK(host_is("2130706433", "127.0.0.1"));
    CHECK(host_is("0x7f000001", "127.0.0.1"));
    CHECK(host_is("0X7F000001", "127.0.0.1"));
    CHECK(host_is("017700000001", "127.0.0.1"));
    CHECK(host_is("0177.0.0.1", "127.0.0.1"));
    CHECK(host_is("0177.0000.0000.0001", "127.0.0.1"));
    CHECK(host_is("127.1", "127.0.0.1"));
    CHECK(host_is("127.0.1", "127.0.0.1"));
    CHECK(host_is("0x7f.1", "127.0.0.1"));
    CHECK(host_is("0x7f.0x0.0x0.0x1", "127.0.0.1"));
    CHECK(host_is("127.0.0.1.", "127.0.0.1"));
    CHECK(host_is("0", "0.0.0.0"));
    CHECK(host_is("0x", "0.0.0.0"));
    CHECK(host_is("4294967295", "255.255.255.255"));
    CHECK(host_is("169.254.43518", "169.254.169.254"));
    CHECK(host_is("[::1]", "::1"));
    CHECK(host_is("::1", "::1"));
    CHECK(host_is("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"));
    CHECK(host_is("[0:0:0:0:0:ffff:7f00:1]", "::ffff:127.0.0.1"));
    CHECK(host_is("[fe80::1%25eth0]", "fe80::1"));

    /* numeric-looking but not an address: refused, never resolved as a name */
    CHECK_EQ_INT(parse_rc("1.2.3.256"), -1);
    CHECK_EQ_INT(parse_rc("256.1"), -1);
    CHECK_EQ_INT(parse_rc("4294967296"), -1);
    CHECK_EQ_INT(parse_rc("99999999999999999999999"), -1);
    CHECK_EQ_INT(parse_rc("08"), -1);
    CHECK_EQ_INT(parse_rc("0x1g"), 0); /* last label not numeric: a name */
    CHECK_EQ_INT(parse_rc("a.1"), -1);
    CHECK_EQ_INT(parse_rc("1.2.3.4.5"), -1);
    CHECK_EQ_INT(parse_rc("1..2"), -1);
    CHECK_EQ_INT(parse_rc("[::1"), -1);
    CHECK_EQ_INT(parse_rc("[::g]"), -1);
    CHECK_EQ_INT(parse_rc("[]"), -1);
    CHECK_EQ_INT(parse_rc(""), -1);
    /* names */
    CHECK_EQ_INT(parse_rc("example.com"), 0);
    CHECK_EQ_INT(parse_rc("1e3"), 0);
    CHECK_EQ_INT(parse_rc("1.2.3.com"), 0);
    CHECK_EQ_INT(parse_rc("localhost"), 0);

    /* the strict form accepts dotted quads only */
    struct gw_ipaddr a;
    CHECK_EQ_INT(gw_ipaddr_parse_strict("127.1", 5, &a), -1);
    CHECK_EQ_INT(gw_ipaddr_parse_strict("0177.0.0.1", 10, &a), -1);
    CHECK_EQ_INT(gw_ipaddr_parse_strict("fe80::1%eth0", 12, &a), -1);
    CHECK_EQ_INT(gw_ipaddr_parse_strict("10.0.0.1", 8, &a), 0);
}

static void test_classes(void)
{
    CHECK_EQ_INT(cls("8.8.8.8"), GW_ADDR_GLOBAL);
    CHECK_EQ_INT(cls("1.1.1.1"), GW_ADDR_GLOBAL);
    CHECK_EQ_INT(cls("172.32.0.1"), GW_ADDR_GLOBAL);
    CHECK_EQ_INT(cls("100.128.0.1"), GW_ADDR_GLOBAL);
    CHECK_EQ_INT(cls("223.255.255.255"), GW_ADDR_GLOBAL);
    CHECK_EQ_INT(cls("127.0.0.1"), GW_ADDR_LOOPBACK);
    CHECK_EQ_INT(cls("127.255.255.254"), GW_ADDR_LOOPBACK);
    CHECK_EQ_INT(cls("10.1.2.3"), GW_ADDR_PRIVATE);
    CHECK_EQ_INT(cls("172.16.0.1"), GW_ADDR_PRIVATE);
    CHECK_EQ_INT(cls("172.31.255.255"), GW_ADDR_PRIVATE);
    CHECK_EQ_INT(cls("192.168.1.1"), GW_ADDR_PRIVATE);
    CHECK_EQ_INT(cls("100.64.0.1"), GW_ADDR_CGNAT);
    CHECK_EQ_INT(cls("100.127.255.255"), GW_ADDR_CGNAT);
    CHECK_EQ_INT(cls("169.254.1.1"), GW_ADDR_LINK_LOCAL);
    CHECK_EQ_INT(cls("169.254.169.254"), GW_ADDR_METADATA);
    CHECK_EQ_INT(cls("169.254.170.2"), GW_ADDR_METADATA);
    CHECK_EQ_INT(cls("100.100.100.200"), GW_ADDR_METADATA);
    CHECK_EQ_INT(cls("168.63.129.16"), GW_ADDR_METADATA);
    CHECK_EQ_INT(cls("224.0.0.1"), GW_ADDR_MULTICAST);
    CHECK_EQ_INT(cls("239.255.255.250"), GW_ADDR_MULTICAST);
    CHECK_EQ_INT(cls("255.255.255.255"), GW_ADDR_BROADCAST);
    CHECK_EQ_INT(cls("240.0.0.1"), GW_ADDR_RESERVED);
    CHECK_EQ_INT(cls("0.0.0.0"), GW_ADDR_UNSPECIFIED);
    CHECK_EQ_INT(cls("0.1.2.3"), GW_ADDR_UNSPECIFIED);
    CHECK_EQ_INT(cls("192.0.2.1"), GW_ADDR_RESERVED);
    CHECK_EQ_INT(cls("198.18.0.1"), GW_ADDR_RESERVED);
    CHECK_EQ_INT(cls("203.0.113.9"), GW_ADDR_RESERVED);

    CHECK_EQ_INT(cls("::1"), GW_ADDR_LOOPBACK);
    CHECK_EQ_INT(cls("::"), GW_ADDR_UNSPECIFIED);
    CHECK_EQ_INT(cls("2606:4700::1111"), GW_ADDR_GLOBAL);
    CHECK_EQ_INT(cls("2a00:1450:4001::1"), GW_ADDR_GLOBAL);
    CHECK_EQ_INT(cls("fc00::1"), GW_ADDR_PRIVATE);
    CHECK_EQ_INT(cls("fd12:3456::1"), GW_ADDR_PRIVATE);
    CHECK_EQ_INT(cls("fec0::1"), GW_ADDR_PRIVATE);
    CHECK_EQ_INT(cls("fe80::1"), GW_ADDR_LINK_LOCAL);
    CHECK_EQ_INT(cls("febf::1"), GW_ADDR_LINK_LOCAL);
    CHECK_EQ_INT(cls("ff02::1"), GW_ADDR_MULTICAST);
    CHECK_EQ_INT(cls("fd00:ec2::254"), GW_ADDR_METADATA);
    CHECK_EQ_INT(cls("fd20:ce::254"), GW_ADDR_METADATA);
    CHECK_EQ_INT(cls("2001:db8::1"), GW_ADDR_RESERVED);
    CHECK_EQ_INT(cls("2001::1"), GW_ADDR_RESERVED); /* Teredo */
    CHECK_EQ_INT(cls("100::1"), GW_ADDR_RESERVED);
    CHECK_EQ_INT(cls("4000::1"), GW_ADDR_RESERVED);
    CHECK_EQ_INT(cls("3fff::1"), GW_ADDR_RESERVED);
    /* IPv6 forms that carry an IPv4 address are judged by it */
    CHECK_EQ_INT(cls("::ffff:127.0.0.1"), GW_ADDR_LOOPBACK);
    CHECK_EQ_INT(cls("::ffff:10.0.0.1"), GW_ADDR_PRIVATE);
    CHECK_EQ_INT(cls("::ffff:169.254.169.254"), GW_ADDR_METADATA);
    CHECK_EQ_INT(cls("::ffff:8.8.8.8"), GW_ADDR_GLOBAL);
    CHECK_EQ_INT(cls("::ffff:0:127.0.0.1"), GW_ADDR_LOOPBACK);
    CHECK_EQ_INT(cls("::127.0.0.1"), GW_ADDR_LOOPBACK);
    CHECK_EQ_INT(cls("::0.0.0.2"), GW_ADDR_UNSPECIFIED);
    CHECK_EQ_INT(cls("64:ff9b::127.0.0.1"), GW_ADDR_LOOPBACK);
    CHECK_EQ_INT(cls("64:ff9b::a9fe:a9fe"), GW_ADDR_METADATA);
    CHECK_EQ_INT(cls("64:ff9b::8.8.8.8"), GW_ADDR_GLOBAL);
    CHECK_EQ_INT(cls("64:ff9b:1::1"), GW_ADDR_PRIVATE);
    CHECK_EQ_INT(cls("2002:7f00:1::1"), GW_ADDR_LOOPBACK);
    CHECK_EQ_INT(cls("2002:c0a8:101::1"), GW_ADDR_PRIVATE);
    CHECK_EQ_INT(cls("2002:808:808::1"), GW_ADDR_GLOBAL);
    CHECK_STR(gw_addr_class_name(GW_ADDR_CGNAT), "carrier-grade NAT");
}

static int cidr_ok(const char *s)
{
    struct gw_cidr c;
    return gw_cidr_parse(s, strlen(s), &c) == 0;
}

static int in_range(const char *range, const char *addr)
{
    struct gw_cidr c;
    struct gw_ipaddr a;
    if (gw_cidr_parse(range, strlen(range), &c) != 0) return -1;
    if (gw_ipaddr_parse_host(addr, strlen(addr), &a) != 1) return -1;
    return gw_cidr_contains(&c, &a);
}

static void test_cidr(void)
{
    CHECK(cidr_ok("10.0.0.0/8"));
    CHECK(cidr_ok("0.0.0.0/0"));
    CHECK(cidr_ok("127.0.0.1"));
    CHECK(cidr_ok("::/0"));
    CHECK(cidr_ok("fd00::/8"));
    CHECK(cidr_ok("[fd00::]/8"));
    CHECK(cidr_ok("[::1]"));
    CHECK(cidr_ok("2001:db8::/32"));
    CHECK(!cidr_ok("10.0.0.1/8")); /* host bits below the prefix */
    CHECK(!cidr_ok("10.0.0.0/33"));
    CHECK(!cidr_ok("::/129"));
    CHECK(!cidr_ok("10.0.0.0/"));
    CHECK(!cidr_ok("10.0.0.0/08"));
    CHECK(!cidr_ok("10.0.0.0/-1"));
    CHECK(!cidr_ok("127.1/32"));
    CHECK(!cidr_ok("/8"));
    CHECK(!cidr_ok("example.com/8"));

    CHECK_EQ_INT(in_range("127.0.0.0/8", "127.9.9.9"), 1);
    CHECK_EQ_INT(in_range("127.0.0.0/8", "128.0.0.1"), 0);
    CHECK_EQ_INT(in_range("127.0.0.1", "127.0.0.1"), 1);
    CHECK_EQ_INT(in_range("127.0.0.1", "127.0.0.2"), 0);
    CHECK_EQ_INT(in_range("0.0.0.0/0", "1.2.3.4"), 1);
    CHECK_EQ_INT(in_range("0.0.0.0/0", "[2001:4860::1]"), 0);
    CHECK_EQ_INT(in_range("10.0.0.0/8", "[::ffff:10.1.1.1]"), 1); /* embedded IPv4 matches IPv4 ranges */
    CHECK_EQ_INT(in_range("10.0.0.0/8", "[64:ff9b::10.1.1.1]"), 1);
    CHECK_EQ_INT(in_range("fd00::/8", "[fd00::5]"), 1);
    CHECK_EQ_INT(in_range("fd00::/8", "[fe00::5]"), 0);
    CHECK_EQ_INT(in_range("2001:db8::/33", "[2001:db8:7fff::1]"), 1);
    CHECK_EQ_INT(in_range("2001:db8::/33", "[2001:db8:8000::1]"), 0);
    CHECK_EQ_INT(in_range("172.16.0.0/12", "172.31.0.1"), 1);
    CHECK_EQ_INT(in_range("172.16.0.0/12", "172.32.0.1"), 0);
}

int main(void)
{
    test_spellings();
    test_classes();
    test_cidr();
    return test_done();
}
