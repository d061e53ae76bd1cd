/* Whether a small step (decode) runs its parallel loops on the pool or on the calling thread, decided from
 * measured step times rather than from a fixed cost model.
 *
 * Why: a single sequence's decode step hands the pool only one or two loops (the LM head) between long
 * serial stretches, so two threads gain at most a few tens of percent, while what the hand-off costs depends
 * on the machine: a worker spinning through the serial part competes with the caller for a shared or
 * oversubscribed vCPU (other processes, the hypervisor's other guests, SMT siblings), and a worker that went
 * to sleep costs a wake-up per step. Measured on 2-vCPU VMs, two threads decoded one sequence 1.4-2x slower
 * than one, and on the same VM at a quieter moment faster (docs/design/runtime.md, "Threads: measured
 * choice"). No fixed threshold is right on every VM at every moment, so the way not chosen is timed for a
 * few steps every 16-512 steps and the faster one is kept.
 *
 * The choice changes only which thread runs a task: the tasks, their split and their order of results are
 * the same, so the numbers are bit for bit those of either way. */
#include <stdlib.h>
#include <string.h>

#include "mm_clock.h"
#include "mm_log.h"
#include "wk_backend_cpu_int.h"

#define PROBE_STEPS CPU_ADAPT_PROBE_STEPS
/* Steps over which a way's time per token is averaged. */
#define EMA_STEPS 32.0
/* Steps between probes: starts short, grows each time a probe confirms the choice by a clear margin. */
#define INTERVAL_MIN 16
#define INTERVAL_MAX 512
/* The other way must be this much faster to replace the choice (noise must not flip it)... */
#define SWITCH_MARGIN 0.97
/* ...and this much slower for the probes to become rarer (twice as rare; four times beyond FAR_MARGIN: a
 * short run must not spend many steps on a way that is far off). */
#define CLEAR_MARGIN 1.10
#define FAR_MARGIN 1.5

static int bucket_of(int64_t n_tokens)
{
    if (n_tokens < 1 || n_tokens > CPU_ADAPT_MAX_TOKENS) return -1;
    int b = 0;
    while (((int64_t)1 << b) < n_tokens) b++;
    return b;
}

int32_t cpu_par_mode_init(struct cpu *c, struct mm_err *err)
{
    memset(c->adapt, 0, sizeof c->adapt);
    /* A size class starts with a probe of each way (the pool first), not with steady steps: the first steps
     * after start pay for page faults and scratch growth, and would weigh on one way's running average. */
    for (int b = 0; b < CPU_ADAPT_BUCKETS; b++) {
        c->adapt[b].mode = 0;
        c->adapt[b].probing = 1;
        c->adapt[b].interval = INTERVAL_MIN;
    }
    c->par_policy = CPU_PAR_AUTO;
    c->par_off = 0;
    c->step_bucket = -1;
    const char *e = getenv("MMGW_CPU_PAR");
    if (!e || !*e || !strcmp(e, "auto")) return MM_OK;
    if (!strcmp(e, "always")) {
        c->par_policy = CPU_PAR_ALWAYS;
        return MM_OK;
    }
    if (!strcmp(e, "never")) {
        c->par_policy = CPU_PAR_NEVER;
        return MM_OK;
    }
    return mm_err_set(err, MM_INVALID, "MMGW_CPU_PAR: '%.32s' is not a policy (auto, always or never)", e);
}

void cpu_par_step_begin(struct cpu *c, int64_t n_tokens, int32_t n_seqs)
{
    c->par_off = c->par_policy == CPU_PAR_NEVER;
    c->step_bucket = -1;
    if (c->threads < 2 || c->par_policy != CPU_PAR_AUTO) return;
    int b = n_seqs == n_tokens ? bucket_of(n_tokens) : -1;
    if (b < 0) return; /* prefill and large decode steps always share the work */
    struct cpu_adapt *a = &c->adapt[b];
    if (!a->probing && a->since >= a->interval) {
        a->probing = 1;
        a->probe = 0;
    }
    c->par_off = a->probing ? a->mode : !a->mode; /* a probe runs the other way */
    c->step_bucket = b;
    c->step_tokens = n_tokens;
    c->step_t0 = mm_now_ns();
}

/* Estimates are averages, not medians: a step that stalls because a worker holding a task was descheduled is
 * the cost being measured, not noise. The chosen way's estimate follows every step it runs (over ~EMA_STEPS
 * steps); the other way's moves halfway to each probe's mean, so one lucky probe cannot flip a choice that
 * had a clear margin, and a real change is followed within two or three probes. */
static void fold(struct cpu_adapt *a, int32_t way, double ns_tok, double weight)
{
    if (!a->have[way]) {
        a->est[way] = ns_tok;
        a->have[way] = 1;
        return;
    }
    a->est[way] += (ns_tok - a->est[way]) * weight;
}

void cpu_par_step_end(struct cpu *c)
{
    if (c->step_bucket >= 0) cpu_par_step_record(c, mm_now_ns() - c->step_t0);
}

void cpu_par_step_record(struct cpu *c, int64_t elapsed_ns)
{
    if (c->step_bucket < 0) return;
    struct cpu_adapt *a = &c->adapt[c->step_bucket];
    const int32_t way = !c->par_off;
    c->step_bucket = -1;
    a->steps[way]++;
    if (!a->probing) {
        a->since++;
        fold(a, way, (double)elapsed_ns / (double)c->step_tokens, 1.0 / EMA_STEPS);
        return;
    }
    if (a->probe++ > 0) { /* the first probe step pays for waking or parking workers */
        a->probe_ns += (double)elapsed_ns;
        a->probe_tokens += c->step_tokens;
    }
    if (a->probe < PROBE_STEPS) return;
    fold(a, way, a->probe_ns / (double)a->probe_tokens, 0.5);
    a->probe_ns = 0;
    a->probe_tokens = 0;
    a->probe = 0;
    if (!a->have[a->mode]) { /* the first comparison: time the other way the same way before choosing */
        a->mode = !a->mode;
        return;
    }
    const double cur = a->est[a->mode], other = a->est[!a->mode];
    if (other < cur * SWITCH_MARGIN) { /* switch, and check the new choice soon */
        a->mode = !a->mode;
        a->switches++;
        a->interval = INTERVAL_MIN;
    } else if (other > cur * CLEAR_MARGIN) { /* clearly slower: probe it less and less */
        a->interval *= other > cur * FAR_MARGIN ? 4 : 2;
        if (a->interval > INTERVAL_MAX) a->interval = INTERVAL_MAX;
    } else { /* close: keep probing often */
        a->interval = a->interval / 2 < INTERVAL_MIN ? INTERVAL_MIN : a->interval / 2;
    }
    a->probing = 0;
    a->since = 0;
}

void cpu_par_report(const struct cpu *c)
{
    if (c->threads < 2 || c->par_policy != CPU_PAR_AUTO) return;
    const int32_t level = getenv("MMGW_PROFILE") ? MM_LOG_INFO : MM_LOG_DEBUG;
    for (int b = 0; b < CPU_ADAPT_BUCKETS; b++) {
        const struct cpu_adapt *a = &c->adapt[b];
        if (!a->steps[0] && !a->steps[1]) continue;
        mm_log(
            level, "runtime",
            "steps of %d-%d tokens: %lld on the calling thread, %lld on the pool, %lld switches; estimates "
            "%.1f vs %.1f us/token, now %s",
            b ? (1 << (b - 1)) + 1 : 1, 1 << b, (long long)a->steps[0], (long long)a->steps[1],
            (long long)a->switches, a->est[0] / 1e3, a->est[1] / 1e3,
            a->mode ? "the pool" : "the calling thread");
    }
}
