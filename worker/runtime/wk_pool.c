#include "wk_pool.h"

#include <pthread.h>
#include <stdalign.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mm_clock.h"

/* Workers spin on the run counter for a while before sleeping: a forward step issues many short parallel
 * loops, and a wake-up costs more than a loop (tens of µs in a VM, where it is an inter-processor interrupt
 * to a halted vCPU; a late-woken worker also claims a task the caller then waits for). The window is in time,
 * not in PAUSE instructions (whose latency differs tenfold between CPUs), and spans a whole decode step of a
 * single sequence (its only parallel loop, the LM head, comes once per step), so continuous decoding never
 * sleeps. The caller's own wait is short: it only waits for tasks a worker has claimed. */
#define SPIN_NS 1000000LL
#define SPIN_ROUNDS 4000 /* the caller's wait: PAUSEs before yielding the core */

typedef void (*wk_pool_task_fn)(void *arg, int64_t task, int32_t thread);

struct wk_pool {
    int32_t n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t sleepers; /* under mu */
    /* gen and stop are what idle workers spin on: a line of their own, so that the caller's and the workers'
     * writes to the ticket and the completion count during a run do not pull it away from the spinners */
    alignas(64) atomic_uint_fast64_t gen;
    atomic_int stop;
    atomic_int caller_cpu; /* the vCPU wk_pool_run last started on (-1: unknown) */
    /* Runs alternate between two slots; tasks are claimed from `ticket` = (run id << 32) | next task, so a
     * worker that wakes up late can never run a task of a newer run with an older run's function. */
    /* Atomic (relaxed; gen's release/acquire orders them) because a worker late from two runs ago may read a
     * slot while the next run fills it: it then finds the ticket of another run and calls nothing, but a
     * plain read racing a write is still undefined behaviour (TSan reports it). */
    struct {
        _Atomic(wk_pool_task_fn) fn;
        _Atomic(void *) arg;
        atomic_int_fast64_t n_tasks;
    } slot[2];
    /* the ticket and the completion count change with every task: one line for both */
    alignas(64) atomic_uint_fast64_t ticket;
    atomic_int_fast64_t completed; /* tasks finished, over all runs */
};

struct worker_arg {
    struct wk_pool *p;
    int32_t id;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void drain(struct wk_pool *p, uint64_t run, int32_t id)
{
    wk_pool_task_fn fn = atomic_load_explicit(&p->slot[run & 1].fn, memory_order_relaxed);
    void *arg = atomic_load_explicit(&p->slot[run & 1].arg, memory_order_relaxed);
    int64_t n_tasks = atomic_load_explicit(&p->slot[run & 1].n_tasks, memory_order_relaxed);
    uint64_t cur = atomic_load(&p->ticket);
    for (;;) {
        if ((cur >> 32) != (run & 0xffffffffu) || (int64_t)(cur & 0xffffffffu) >= n_tasks) return;
        if (!atomic_compare_exchange_weak(&p->ticket, &cur, cur + 1)) continue;
        fn(arg, (int64_t)(cur & 0xffffffffu), id);
        atomic_fetch_add_explicit(&p->completed, 1, memory_order_release);
        cur = atomic_load(&p->ticket);
    }
}

/* Whether this worker runs on the vCPU the caller last started a run on. The scheduler sometimes stacks both
 * threads on one vCPU (wake-affine placement while the other vCPU is busy with another process: observed on
 * a 2-vCPU VM, /proc/PID/task/TID/stat, with two threads decoding one sequence 3x slower than one). A worker
 * spinning there only takes time from the caller, so it sleeps instead; a later wake-up may place it better.
 */
static int on_callers_cpu(struct wk_pool *p)
{
#ifdef __linux__
    int me = sched_getcpu();
    return me >= 0 && me == atomic_load_explicit(&p->caller_cpu, memory_order_relaxed);
#else
    (void)p;
    return 0;
#endif
}

static void *worker(void *a)
{
    struct worker_arg *wa = a;
    struct wk_pool *p = wa->p;
    int32_t id = wa->id;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int64_t spins = 0, t0 = mm_now_ns();
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
            if ((++spins & 63) || (mm_now_ns() - t0 < SPIN_NS && !on_callers_cpu(p))) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            p->sleepers--;
            pthread_mutex_unlock(&p->mu);
            t0 = mm_now_ns();
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        drain(p, g, id);
    }
    return NULL;
}

struct wk_pool *wk_pool_create(int32_t n_threads)
{
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int32_t)c : 1;
    }
    if (n_threads > 256) n_threads = 256;
    struct wk_pool *p = aligned_alloc(64, (sizeof(struct wk_pool) + 63) / 64 * 64);
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->caller_cpu, -1);
    atomic_init(&p->ticket, 0);
    atomic_init(&p->completed, 0);
    if (n_threads > 1) {
        p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
        if (!p->th) {
            p->n = 1;
            wk_pool_destroy(p);
            return NULL;
        }
        for (int32_t i = 1; i < n_threads; i++) {
            struct worker_arg *wa = malloc(sizeof *wa);
            if (wa) {
                wa->p = p;
                wa->id = i;
            }
            if (!wa || pthread_create(&p->th[i - 1], NULL, worker, wa) != 0) {
                free(wa);
                p->n = i; /* only the threads started so far */
                wk_pool_destroy(p);
                return NULL;
            }
        }
    }
    return p;
}

void wk_pool_destroy(struct wk_pool *p)
{
    if (!p) return;
    atomic_store(&p->stop, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 1; i < p->n && p->th; i++) pthread_join(p->th[i - 1], NULL);
    free(p->th);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

int32_t wk_pool_threads(const struct wk_pool *p)
{
    return p->n;
}

void wk_pool_run(struct wk_pool *p, int64_t n_tasks, void (*fn)(void *arg, int64_t task, int32_t thread),
                 void *arg)
{
    if (n_tasks <= 0) return;
    if (p->n == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    /* tasks are numbered in 32 bits */
    if (n_tasks > 0x7fffffff) n_tasks = 0x7fffffff;
    uint64_t run = atomic_load(&p->gen) + 1;
    atomic_store_explicit(&p->slot[run & 1].fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->slot[run & 1].arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->slot[run & 1].n_tasks, n_tasks, memory_order_relaxed);
    int64_t target = atomic_load(&p->completed) + n_tasks;
#ifdef __linux__
    atomic_store_explicit(&p->caller_cpu, sched_getcpu(), memory_order_relaxed);
#endif
    atomic_store(&p->ticket, (run & 0xffffffffu) << 32);
    atomic_store_explicit(&p->gen, run, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers) pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    drain(p, run, 0);
    /* only tasks some worker has claimed are still running: wait for those, not for sleepy workers */
    for (int spins = 0; atomic_load_explicit(&p->completed, memory_order_acquire) < target; spins++) {
        /* a worker holding a task may have been descheduled (a busy machine): give it the core */
        if (spins < SPIN_ROUNDS)
            cpu_relax();
        else
            sched_yield();
    }
}
