/* The circuit breaker state machine, with an explicit clock. */
#include "gw_breaker.h"
#include "mmgw_test.h"

int main(void)
{
    struct gw_breaker_opts o = {.failures = 3, .cooldown_ms = 100, .max_cooldown_ms = 350};
    struct gw_breaker b;
    gw_breaker_init(&b, &o);
    uint64_t t = 1000;
    CHECK_EQ_INT(b.state, GW_BREAKER_CLOSED);
    CHECK(gw_breaker_available(&b, t));
    CHECK_EQ_INT(gw_breaker_dispatch(&b, t), 0); /* not a probe while closed */

    /* failures below the threshold, then a success, reset the count */
    gw_breaker_failure(&b, &o, t);
    gw_breaker_failure(&b, &o, t);
    gw_breaker_success(&b, &o);
    gw_breaker_failure(&b, &o, t);
    gw_breaker_failure(&b, &o, t);
    CHECK_EQ_INT(b.state, GW_BREAKER_CLOSED);
    gw_breaker_failure(&b, &o, t);
    CHECK_EQ_INT(b.state, GW_BREAKER_OPEN);
    CHECK_EQ_INT(b.opens, 1);
    CHECK(!gw_breaker_available(&b, t + 99));
    /* failures of requests sent before it opened change nothing */
    gw_breaker_failure(&b, &o, t + 50);
    CHECK(!gw_breaker_available(&b, t + 99));

    /* after the cooldown exactly one probe may go */
    CHECK(gw_breaker_available(&b, t + 100));
    CHECK_EQ_INT(gw_breaker_dispatch(&b, t + 100), 1);
    CHECK_EQ_INT(b.state, GW_BREAKER_HALF_OPEN);
    CHECK(!gw_breaker_available(&b, t + 100));
    CHECK_EQ_INT(gw_breaker_dispatch(&b, t + 101), 0);
    /* the probe fails: open again, twice as long */
    gw_breaker_failure(&b, &o, t + 110);
    CHECK_EQ_INT(b.state, GW_BREAKER_OPEN);
    CHECK_EQ_INT(b.opens, 2);
    CHECK(!gw_breaker_available(&b, t + 110 + 199));
    CHECK(gw_breaker_available(&b, t + 110 + 200));
    /* and again: 400 capped at 350 */
    CHECK_EQ_INT(gw_breaker_dispatch(&b, t + 310), 1);
    gw_breaker_failure(&b, &o, t + 310);
    CHECK(!gw_breaker_available(&b, t + 310 + 349));
    CHECK(gw_breaker_available(&b, t + 310 + 350));
    /* a cancelled probe lets another go */
    CHECK_EQ_INT(gw_breaker_dispatch(&b, t + 700), 1);
    gw_breaker_release_probe(&b);
    CHECK(gw_breaker_available(&b, t + 700));
    CHECK_EQ_INT(gw_breaker_dispatch(&b, t + 700), 1);
    /* the probe succeeds: closed, count and cooldown reset */
    gw_breaker_success(&b, &o);
    CHECK_EQ_INT(b.state, GW_BREAKER_CLOSED);
    CHECK_EQ_INT(b.consecutive, 0);
    CHECK_EQ_INT(b.cooldown_ms, 100);
    CHECK_STR(gw_breaker_state_name(GW_BREAKER_HALF_OPEN), "half_open");

    /* defaults: 5 failures */
    gw_breaker_init(&b, NULL);
    for (int i = 0; i < 4; i++) gw_breaker_failure(&b, NULL, t);
    CHECK_EQ_INT(b.state, GW_BREAKER_CLOSED);
    gw_breaker_failure(&b, NULL, t);
    CHECK_EQ_INT(b.state, GW_BREAKER_OPEN);
    return test_done();
}
