/* A libevent loop with a gw_executor for the upstream/router tests: posts from any thread queue a
 * function and wake the loop, which runs it on the test's thread (the product's gw_event_exec, as each
 * gateway/http loop has), run for a bounded time or until a condition holds. */
#ifndef TEST_LOOP_H
#define TEST_LOOP_H

#include "gw_executor.h"

struct event_base;
struct test_loop;

struct test_loop *test_loop_new(void);
void test_loop_free(struct test_loop *l);
struct event_base *test_loop_base(struct test_loop *l);
const struct gw_executor *test_loop_executor(struct test_loop *l);
/** Run until done(arg) is true (checked after every event and every 5 ms) or timeout_ms passes.
 * Returns 1 when done, 0 on timeout. done NULL: just run for timeout_ms. */
int test_loop_run(struct test_loop *l, int (*done)(void *arg), void *arg, int timeout_ms);
/** Functions run through the executor so far. */
unsigned long test_loop_posted(struct test_loop *l);

#endif
