/* The CPU backend's measured choice between the pool and the calling thread for decode steps
 * (worker/runtime/wk_cpu_par.c), driven with given step times: it settles on the faster way, follows a
 * change of which way is faster, spends few steps on the slower way once settled, leaves prefill steps on
 * the pool, and honours MMGW_CPU_PAR. */
#include <stdlib.h>
#include <string.h>

#include "mmgw_test.h"
#include "wk_backend_cpu_int.h"

/* Run `steps` decode steps of n tokens where the calling thread takes serial_ns and the pool pool_ns per
 * step; count the steps that ran each way. */
static void drive(struct cpu *c, int32_t n, int64_t serial_ns, int64_t pool_ns, int32_t steps, int64_t *ways)
{
    for (int32_t s = 0; s < steps; s++) {
        cpu_par_step_begin(c, n, n);
        ways[!c->par_off]++;
        cpu_par_step_record(c, c->par_off ? serial_ns : pool_ns);
    }
}

static struct cpu *new_cpu(int32_t threads)
{
    struct cpu *c = calloc(1, sizeof *c);
    CHECK(c != NULL);
    if (!c) exit(1);
    c->threads = threads;
    struct mm_err err = {0};
    CHECK_EQ_INT(cpu_par_mode_init(c, &err), MM_OK);
    return c;
}

static void test_settles_and_follows(void)
{
    unsetenv("MMGW_CPU_PAR");
    struct cpu *c = new_cpu(2);
    int64_t w[2] = {0, 0};
    /* the pool is twice as slow (a worker competing for its vCPU): the calling thread wins */
    drive(c, 1, 80000, 160000, 100, w);
    CHECK(w[0] > 50);
    drive(c, 1, 80000, 160000, 3000, w);
    memset(w, 0, sizeof w);
    drive(c, 1, 80000, 160000, 4000, w);
    CHECK(w[1] * 40 < w[0]); /* settled: under 2.5% of steps probe the slower way */
    CHECK(w[1] > 0);         /* but it is still probed */
    /* the machine got quiet and the pool is now faster: the choice follows within a few hundred steps */
    memset(w, 0, sizeof w);
    drive(c, 1, 80000, 50000, 1600, w);
    CHECK(c->adapt[0].mode == 1);
    memset(w, 0, sizeof w);
    drive(c, 1, 80000, 50000, 3000, w);
    CHECK(w[0] * 20 < w[1]);
    /* size classes are separate: 16-token steps start on the pool and keep it when it is faster */
    memset(w, 0, sizeof w);
    drive(c, 16, 800000, 300000, 1000, w);
    CHECK(w[0] * 20 < w[1]);
    /* a difference within noise does not flip the choice back and forth */
    int64_t before = c->adapt[0].switches;
    drive(c, 1, 50000, 50500, 2000, w);
    CHECK(c->adapt[0].switches - before <= 1);
    free(c);
}

static void test_prefill_and_policies(void)
{
    unsetenv("MMGW_CPU_PAR");
    struct cpu *c = new_cpu(2);
    int64_t w[2] = {0, 0};
    /* prefill steps (several tokens of one sequence) always run on the pool, even when it looks slower */
    for (int32_t s = 0; s < 200; s++) {
        cpu_par_step_begin(c, 32, 1);
        w[!c->par_off]++;
        cpu_par_step_record(c, c->par_off ? 1000 : 9000000);
    }
    CHECK_EQ_INT(w[0], 0);
    /* so do decode steps above the adaptive size */
    cpu_par_step_begin(c, CPU_ADAPT_MAX_TOKENS + 1, CPU_ADAPT_MAX_TOKENS + 1);
    CHECK_EQ_INT(c->par_off, 0);
    cpu_par_step_end(c);
    free(c);
    /* one thread: nothing to choose, nothing measured */
    c = new_cpu(1);
    drive(c, 1, 1000, 9000, 100, w);
    CHECK_EQ_INT(c->adapt[0].steps[0] + c->adapt[0].steps[1], 0);
    free(c);
    /* MMGW_CPU_PAR=always: the pool whatever the times; never: the calling thread */
    setenv("MMGW_CPU_PAR", "always", 1);
    c = new_cpu(2);
    memset(w, 0, sizeof w);
    drive(c, 1, 1000, 9000, 300, w);
    CHECK_EQ_INT(w[1], 300);
    free(c);
    setenv("MMGW_CPU_PAR", "never", 1);
    c = new_cpu(2);
    memset(w, 0, sizeof w);
    drive(c, 16, 9000, 1000, 300, w);
    CHECK_EQ_INT(w[0], 300);
    free(c);
    setenv("MMGW_CPU_PAR", "sometimes", 1);
    c = calloc(1, sizeof *c);
    struct mm_err err = {0};
    if (c) {
        c->threads = 2;
        CHECK_EQ_INT(cpu_par_mode_init(c, &err), MM_INVALID);
        CHECK(strstr(err.msg, "MMGW_CPU_PAR") != NULL);
    }
    free(c);
    unsetenv("MMGW_CPU_PAR");
}

int main(void)
{
    test_settles_and_follows();
    test_prefill_and_policies();
    return test_done();
}
