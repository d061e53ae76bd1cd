/* Internals of the CPU backend, shared by its files: wk_backend_cpu.c (operation table, memory, weights,
 * element-wise ops, linear layers), wk_cpu_attn.c (paged cache, attention, MSA) and wk_cpu_moe.c (routed
 * experts). */
#ifndef WK_BACKEND_CPU_INT_H
#define WK_BACKEND_CPU_INT_H

#include <stdint.h>

#include "wk_backend.h"
#include "wk_pool.h"

/* A weight: 2-D (and higher) tensors packed for kn_wgemm (kernels/cpu/kn_wgemm.h), 1-D ones (norms,
 * biases) as plain fp32 vectors. */
struct wk_weight {
    float *data;
    int64_t rows, cols;
    int32_t packed;
};

/* Scratch that grows on demand and is kept between steps (no allocation in a steady decode loop). */
struct grow {
    float *p;
    int64_t n;
};

int grow_to(struct grow *g, int64_t n);

/* Per-thread scratch of the MoE and attention tasks. */
struct cpu_tscr {
    struct grow a, b; /* MoE gate/up rows; MSA block scores + selection */
};

/* Decode steps (one token per sequence) of up to this many tokens choose between the pool and the calling
 * thread by measured time (wk_cpu_par.c); one state per power-of-two size class. */
#define CPU_ADAPT_MAX_TOKENS 64
#define CPU_ADAPT_BUCKETS 7
/* Steps of a probe of the way not chosen (the first of them not counted: it wakes or parks workers). */
#define CPU_ADAPT_PROBE_STEPS 8

enum cpu_par_policy { CPU_PAR_AUTO, CPU_PAR_ALWAYS, CPU_PAR_NEVER };

struct cpu_adapt {
    int32_t mode;     /* the choice: 1 = pool, 0 = calling thread */
    int32_t probing;  /* timing the other way for CPU_ADAPT_PROBE_STEPS steps */
    int32_t probe;    /* steps of the probe so far */
    int32_t since;    /* steps since the last probe */
    int32_t interval; /* steps between probes */
    int32_t have[2];  /* whether est[way] holds a measurement */
    double probe_ns;  /* time and tokens of the probe so far (its first step not counted) */
    int64_t probe_tokens;
    double est[2];    /* running ns per token, [calling thread, pool] */
    int64_t steps[2]; /* steps run each way */
    int64_t switches; /* times the choice changed */
};

struct cpu {
    struct wk_pool *pool;
    int32_t threads;
    /* measured choice of pool or calling thread for small steps (wk_cpu_par.c) */
    int32_t par_policy; /* enum cpu_par_policy: MMGW_CPU_PAR */
    int32_t par_off;    /* this step runs its loops on the calling thread */
    int32_t step_bucket;
    int64_t step_tokens, step_t0;
    struct cpu_adapt adapt[CPU_ADAPT_BUCKETS];
    /* paged cache (wk_cpu_attn.c): key-transposed pages, kernels/cpu/kn_pattn.h */
    struct wk_cache_geom geom;
    void **k, **v, **idx;  /* per layer: float, or uint16_t fp16 bits when kv_f16 */
    int32_t kv_f16;        /* MMGW_CPU_KV=f16: half-precision cache elements */
    uint8_t *layer_sparse; /* copy of geom.layer_sparse */
    /* current batch */
    const struct wk_batch *b;
    int32_t failed; /* scratch allocation failed during the step */
    /* scratch */
    struct cpu_tscr *tscr; /* [threads] */
    struct grow moe_x, moe_y, moe_logits, attn;
    struct grow cands;              /* topk_rows: one row's copy for its quickselect */
    int32_t *moe_choice, *moe_slot; /* [n * topk]: expert per (token, k), its row in the grouped order */
    float *moe_w;                   /* [n * topk] */
    int32_t *moe_count, *moe_first; /* [n_experts + 1] */
    int64_t moe_cap, moe_ecap;
    int64_t *tasks; /* MoE task list (expert, first row, rows) */
    int64_t tasks_cap;
};

/* Whether large buffers and the cache ask for huge pages (MMGW_HUGEPAGES=0 turns it off, e.g. to measure
 * resident memory in 4 KiB steps). */
int cpu_hugepages(void);

/* Below this many multiply-adds a loop runs on the calling thread: handing it to the pool costs more. */
#define CPU_PAR_MIN_MACS (1 << 17)

/* Run fn over n_tasks on the pool, or inline when the whole loop is worth less than CPU_PAR_MIN_MACS. */
void cpu_par(struct cpu *c, int64_t n_tasks, int64_t macs,
             void (*fn)(void *arg, int64_t task, int32_t thread), void *arg);

/* y[n][rows(w)] = x[n][cols(w)] . w^T (+ bias), split over the pool by output columns when it pays. */
void cpu_linear_par(struct cpu *c, const struct wk_weight *w, const struct wk_weight *bias, const float *x,
                    int64_t n, float *y);
/* The same on the calling thread (inside a pool task). */
void cpu_linear_1(const struct wk_weight *w, const float *x, int64_t n, float *y);

/* wk_cpu_par.c: MMGW_CPU_PAR (auto, always, never) and the initial state; then, around every step, the
 * choice for it (sets par_off) and its measurement. */
int32_t cpu_par_mode_init(struct cpu *c, struct mm_err *err);
void cpu_par_step_begin(struct cpu *c, int64_t n_tokens, int32_t n_seqs);
void cpu_par_step_end(struct cpu *c);
/* cpu_par_step_end with the step's time given (tests drive the choice with it). */
void cpu_par_step_record(struct cpu *c, int64_t elapsed_ns);
/* Log (info with MMGW_PROFILE set, else debug) each size class's steps per way and its estimates. */
void cpu_par_report(const struct cpu *c);

/* wk_cpu_attn.c */
/* MMGW_CPU_KV (f32 or f16) into c->kv_f16; read once, when the backend is created, so that the page size
 * the runtime is told and the cache that cache_init allocates agree. */
int32_t cpu_kv_dtype(struct cpu *c, struct mm_err *err);
int64_t cpu_cache_page_bytes(void *ctx, const struct wk_cache_geom *g);
int32_t cpu_cache_init(void *ctx, const struct wk_cache_geom *g, struct mm_err *err);
void cpu_cache_free(struct cpu *c);
void cpu_cache_copy_page(void *ctx, int32_t dst, int32_t src, int32_t n_tokens);
void cpu_kv_write(void *ctx, int32_t layer, const float *k, const float *v);
void cpu_idx_write(void *ctx, int32_t layer, const float *idx_k);
void cpu_attn_dense(void *ctx, int32_t layer, const float *q, int32_t n_heads, float scale, float *out);
void cpu_attn_msa(void *ctx, int32_t layer, const float *q, const float *idx_q, int32_t n_heads, float scale,
                  const struct wk_msa_params *p, const struct wk_sel_out *sel, float *out);
void cpu_attn_layer(void *ctx, const struct wk_attn_layer *a);

/* wk_cpu_moe.c */
void cpu_moe(void *ctx, const struct wk_moe *m, const float *x, int64_t n, float *out);
void cpu_moe_free(struct cpu *c);

#endif
