/* Internal to kn_pattn.c: the paged-attention loops, included once per instruction-set level and cache
 * element type with
 *   PW       lanes per vector (16, 8 or 4)
 *   PVEC     that vector type (kn_v16f, kn_v8f or kn_v4f: the native width, so tiles stay in registers)
 *   PVECI    the int32 vector of the same lanes; PLANES: {0, 1, ..., PW - 1}
 *   PVECU    its unaligned view (kn_v16f_u, ...)
 *   PKT      the cache element (float, or uint16_t holding IEEE half-precision bits)
 *   PLD(p)   PW cache elements at p as a PVEC; PCV1(x): one element as a float
 *   PFMA(a, b, c)  a * b + c as the vector code computes it (one rounding where the level has FMA): the
 *            scalar tails stay the same chain whether or not the compiler could vectorize them
 *   PFN(x)   the name of x for this level and element type
 *   PTARGET  the level's target attribute (empty for the baseline)
 * and undefines them all at its end.
 *
 * Keys are visited as a list of segments (a run of visible keys of one page) laid end to end in a score
 * buffer of up to SC_SUB columns, so the softmax bookkeeping (max, rescale, sums) runs once per buffer, not
 * once per page: with small pages (16 tokens) it would otherwise cost more than the products. Head counts
 * (GS) and vector counts (JV, DV) are constants at every call, so each tile's accumulators are registers. */

/* Scores of GS heads (rows of q, ldq apart) against JV vectors of PW keys; vector v starts at kp[v]
 * (key-transposed: dimension d at kp[v][d * block]) and lands at column col[v] of the GS score rows. */
PTARGET KN_INLINE void PFN(chunk)(int GS, int JV, const float *q, int64_t ldq, int32_t dim,
                                  const PKT *const *kp, int64_t block, float *sc, const int32_t *col,
                                  float scale)
{
    PVEC acc[4][4];
    for (int i = 0; i < GS; i++)
        for (int v = 0; v < JV; v++) acc[i][v] = (PVEC){0};
    for (int32_t d = 0; d < dim; d++) {
        PVEC kv[4];
        for (int v = 0; v < JV; v++) kv[v] = PLD(kp[v] + d * block);
        for (int i = 0; i < GS; i++) {
            float qd = q[i * ldq + d];
            for (int v = 0; v < JV; v++) acc[i][v] += kv[v] * qd;
        }
    }
    /* in list order: a vector running past its segment's end is overwritten by the next segment */
    for (int v = 0; v < JV; v++)
        for (int i = 0; i < GS; i++) *(PVECU *)(sc + i * SC_STRIDE + col[v]) = acc[i][v] * scale;
}

/* One score segment: keys [j0, j0 + len) of the page at kb (K or index keys) / vb (V), at column col. */
struct PFN(seg) {
    const PKT *kb, *vb;
    int32_t j0, len, col;
};

/* Scores of G (<= KN_PATTN_G) heads against every key of the segments into sc (rows SC_STRIDE apart). Full
 * vectors of keys first (in list order), then single keys where a page's row ends inside a vector (block
 * sizes that are not a multiple of the width). */
PTARGET KN_INLINE void PFN(scores)(const float *q, int32_t G, int32_t dim, const struct PFN(seg) * sg,
                                   int32_t ns, int64_t block, float *sc, float scale)
{
    const PKT *kp[SC_SUB / PW + 4];
    int32_t col[SC_SUB / PW + 4], nv = 0;
    for (int32_t s = 0; s < ns; s++)
        for (int32_t j = sg[s].j0; j < sg[s].j0 + sg[s].len && j + PW <= block; j += PW) {
            kp[nv] = sg[s].kb + j;
            col[nv++] = sg[s].col + (j - sg[s].j0);
        }
    for (int32_t g = 0; g < G;) {
        int gs = G - g >= 4 ? 4 : G - g >= 2 ? 2 : 1;
        const float *qg = q + (int64_t)g * dim;
        float *sg0 = sc + g * SC_STRIDE;
        int32_t v = 0;
        if (gs == 4) {
            /* 16 accumulators where 32 registers hold them (AVX-512), 8 otherwise */
            if (PW == 16)
                for (; v + 4 <= nv; v += 4)
                    PFN(chunk)(4, 4, qg, dim, dim, kp + v, block, sg0, col + v, scale);
            for (; v + 2 <= nv; v += 2) PFN(chunk)(4, 2, qg, dim, dim, kp + v, block, sg0, col + v, scale);
            for (; v < nv; v++) PFN(chunk)(4, 1, qg, dim, dim, kp + v, block, sg0, col + v, scale);
        } else if (gs == 2) {
            for (; v + 4 <= nv; v += 4) PFN(chunk)(2, 4, qg, dim, dim, kp + v, block, sg0, col + v, scale);
            for (; v < nv; v++) PFN(chunk)(2, 1, qg, dim, dim, kp + v, block, sg0, col + v, scale);
        } else {
            for (; v + 4 <= nv; v += 4) PFN(chunk)(1, 4, qg, dim, dim, kp + v, block, sg0, col + v, scale);
            for (; v < nv; v++) PFN(chunk)(1, 1, qg, dim, dim, kp + v, block, sg0, col + v, scale);
        }
        g += gs;
    }
    for (int32_t s = 0; s < ns; s++) {
        int32_t end = sg[s].j0 + sg[s].len, j = sg[s].j0;
        while (j < end && j + PW <= block) j += PW;
        for (; j < end; j++)
            for (int32_t g = 0; g < G; g++) {
                const float *qg = q + (int64_t)g * dim;
                float t = 0.0f;
                for (int32_t d = 0; d < dim; d++) t = PFMA(qg[d], PCV1(sg[s].kb[d * block + j]), t);
                sc[g * SC_STRIDE + sg[s].col + (j - sg[s].j0)] = t * scale;
            }
    }
}

/* out[i][d] += sum over the segments' keys of p[i][col + j] * V[j][d], for GS heads; 2 or 1 vectors of dims
 * per pass, accumulators in registers across all segments */
PTARGET KN_INLINE void PFN(pv)(int GS, const float *p, const struct PFN(seg) * sg, int32_t ns, int32_t hd,
                               float *out)
{
    int32_t d0 = 0;
    for (; d0 + 2 * PW <= hd; d0 += 2 * PW) {
        PVEC acc[4][2];
        for (int i = 0; i < GS; i++)
            for (int v = 0; v < 2; v++) acc[i][v] = *(const PVECU *)(out + i * hd + d0 + v * PW);
        for (int32_t s = 0; s < ns; s++) {
            const PKT *vb = sg[s].vb + (int64_t)sg[s].j0 * hd + d0;
            const float *ps = p + sg[s].col;
            for (int32_t j = 0; j < sg[s].len; j++) {
                PVEC vv[2];
                for (int v = 0; v < 2; v++) vv[v] = PLD(vb + (int64_t)j * hd + v * PW);
                for (int i = 0; i < GS; i++) {
                    float pj = ps[i * SC_STRIDE + j];
                    for (int v = 0; v < 2; v++) acc[i][v] += vv[v] * pj;
                }
            }
        }
        for (int i = 0; i < GS; i++)
            for (int v = 0; v < 2; v++) *(PVECU *)(out + i * hd + d0 + v * PW) = acc[i][v];
    }
    for (; d0 + PW <= hd; d0 += PW) {
        PVEC acc[4];
        for (int i = 0; i < GS; i++) acc[i] = *(const PVECU *)(out + i * hd + d0);
        for (int32_t s = 0; s < ns; s++) {
            const PKT *vb = sg[s].vb + (int64_t)sg[s].j0 * hd + d0;
            const float *ps = p + sg[s].col;
            for (int32_t j = 0; j < sg[s].len; j++) {
                PVEC vv = PLD(vb + (int64_t)j * hd);
                for (int i = 0; i < GS; i++) acc[i] += vv * ps[i * SC_STRIDE + j];
            }
        }
        for (int i = 0; i < GS; i++) *(PVECU *)(out + i * hd + d0) = acc[i];
    }
    for (; d0 < hd; d0++)
        for (int i = 0; i < GS; i++) {
            float a = out[i * hd + d0];
            for (int32_t s = 0; s < ns; s++)
                for (int32_t j = 0; j < sg[s].len; j++)
                    a = PFMA(p[i * SC_STRIDE + sg[s].col + j],
                             PCV1(sg[s].vb[(int64_t)(sg[s].j0 + j) * hd + d0]), a);
            out[i * hd + d0] = a;
        }
}

/* Lane-wise maximum (the scores are never NaN). */
PTARGET KN_INLINE PVEC PFN(vmax2)(PVEC a, PVEC b)
{
    PVECI m = a > b;
    return (PVEC)(((PVECI)a & m) | ((PVECI)b & ~m));
}

/* Largest of the first `valid` (1..PW) lanes of v: a halving tree of shuffles (a store and a scalar loop
 * would cost about as much as the scores it reduces). */
PTARGET KN_INLINE float PFN(vmax)(PVEC v, int32_t valid)
{
    if (valid < PW) {
        PVECI lane = PLANES;
        PVECI keep = lane < valid;
        PVEC ninf = (PVEC){0} - INFINITY;
        v = (PVEC)(((PVECI)v & keep) | ((PVECI)ninf & ~keep));
    }
#if PW == 16
    v = PFN(vmax2)(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    v = PFN(vmax2)(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
    v = PFN(vmax2)(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
    v = PFN(vmax2)(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
#elif PW == 8
    v = PFN(vmax2)(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3));
    v = PFN(vmax2)(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5));
    v = PFN(vmax2)(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6));
#else
    v = PFN(vmax2)(v, __builtin_shufflevector(v, v, 2, 3, 0, 1));
    v = PFN(vmax2)(v, __builtin_shufflevector(v, v, 1, 0, 3, 2));
#endif
    return v[0];
}

/* max and sum of a row: PW running lanes, folded in halves (a short dependency chain: rows are often one
 * or two vectors long); the sum adds a tail shorter than a vector into lane 0 before folding */
PTARGET KN_INLINE float PFN(row_max)(const float *s, int64_t n)
{
    PVEC m = (PVEC){0} - INFINITY;
    int64_t j = 0;
    for (; j + PW <= n; j += PW) m = PFN(vmax2)(m, *(const PVECU *)(s + j));
    float r = PFN(vmax)(m, PW);
    for (; j < n; j++) r = s[j] > r ? s[j] : r;
    return r;
}

PTARGET KN_INLINE float PFN(row_sum)(const float *s, int64_t n)
{
    PVEC a = (PVEC){0};
    int64_t j = 0;
    for (; j + PW <= n; j += PW) a += *(const PVECU *)(s + j);
    float t0 = a[0];
    for (; j < n; j++) t0 += s[j];
    a[0] = t0;
#if PW == 16
    a += __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    a += __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    a += __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    a += __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
#elif PW == 8
    a += __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3);
    a += __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5);
    a += __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6);
#else
    a += __builtin_shufflevector(a, a, 2, 3, 0, 1);
    a += __builtin_shufflevector(a, a, 1, 0, 3, 2);
#endif
    return a[0];
}

/* Online softmax step over the buffered segments (n columns), then their values. */
PTARGET KN_INLINE void PFN(flush)(const float *q, int32_t G, int32_t hd, float scale,
                                  const struct PFN(seg) * sg, int32_t ns, int32_t n, int64_t block, float *sc,
                                  float *m, float *l, float *out)
{
    if (!ns) return;
    PFN(scores)(q, G, hd, sg, ns, block, sc, scale);
    for (int32_t g = 0; g < G; g++) {
        float *s = sc + g * SC_STRIDE;
        float bm = PFN(row_max)(s, n);
        if (bm > m[g]) {
            /* rescale what was accumulated under the old maximum */
            float corr = m[g] == -INFINITY ? 0.0f : expneg_body(m[g] - bm);
            l[g] *= corr;
            float *o = out + (int64_t)g * hd;
            for (int32_t d = 0; d < hd; d++) o[d] *= corr;
            m[g] = bm;
        }
        float mg = m[g];
        for (int32_t j = 0; j < n; j++) s[j] = expneg_body(s[j] - mg);
        l[g] += PFN(row_sum)(s, n);
    }
    int32_t g = 0;
    for (; g + 4 <= G; g += 4) PFN(pv)(4, sc + g * SC_STRIDE, sg, ns, hd, out + (int64_t)g * hd);
    for (; g + 2 <= G; g += 2) PFN(pv)(2, sc + g * SC_STRIDE, sg, ns, hd, out + (int64_t)g * hd);
    for (; g < G; g++) PFN(pv)(1, sc + g * SC_STRIDE, sg, ns, hd, out + (int64_t)g * hd);
}

PTARGET static void PFN(gqa)(const float *restrict q, int32_t G, int64_t pos, float scale, const PKT *kt,
                             const PKT *v, int32_t hd, int32_t block, const int32_t *bt,
                             const int32_t *blocks, int32_t nb, float *restrict out)
{
    float sc[KN_PATTN_G * SC_STRIDE];
    struct PFN(seg) sg[SC_SUB];
    float m[KN_PATTN_G], l[KN_PATTN_G];
    for (int32_t g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    memset(out, 0, sizeof(float) * (size_t)G * (size_t)hd);
    int64_t page = (int64_t)hd * block; /* kt, v: this KV head's pages, contiguous */
    int64_t n_iter = blocks ? nb : pos / block + 1;
    int32_t ns = 0, n = 0;
    for (int64_t bi = 0; bi < n_iter; bi++) {
        int64_t b = blocks ? blocks[bi] : bi, t0 = b * block;
        if (b < 0 || t0 > pos) continue;
        int64_t jn = pos - t0 + 1 < block ? pos - t0 + 1 : block;
        const PKT *kb = kt + bt[b] * page, *vb = v + bt[b] * page;
        for (int64_t j0 = 0; j0 < jn; j0 += SC_SUB) {
            int32_t len = (int32_t)(jn - j0 < SC_SUB ? jn - j0 : SC_SUB);
            if (n + len > SC_SUB) {
                PFN(flush)(q, G, hd, scale, sg, ns, n, block, sc, m, l, out);
                ns = n = 0;
            }
            sg[ns++] = (struct PFN(seg)){kb, vb, (int32_t)j0, len, n};
            n += len;
        }
    }
    PFN(flush)(q, G, hd, scale, sg, ns, n, block, sc, m, l, out);
    for (int32_t g = 0; g < G; g++)
        if (l[g] > 0.0f) {
            float inv = 1.0f / l[g];
            float *o = out + (int64_t)g * hd;
            for (int32_t d = 0; d < hd; d++) o[d] *= inv;
        }
}

/* Block maxima of the buffered segments (one per block) into scores[g * hs + blk[s]]. */
PTARGET KN_INLINE void PFN(iflush)(const float *q, int32_t nh, int32_t dim, const struct PFN(seg) * sg,
                                   const int32_t *blk, int32_t ns, int64_t block, float *sc, float *scores,
                                   int64_t hs)
{
    for (int32_t g0 = 0; g0 < nh && ns; g0 += KN_PATTN_G) {
        int32_t G = nh - g0 < KN_PATTN_G ? nh - g0 : KN_PATTN_G;
        PFN(scores)(q + (int64_t)g0 * dim, G, dim, sg, ns, block, sc, 1.0f);
        for (int32_t g = 0; g < G; g++)
            for (int32_t s = 0; s < ns; s++) {
                float mx = PFN(row_max)(sc + g * SC_STRIDE + sg[s].col, sg[s].len);
                float *dst = scores + (g0 + g) * hs + blk[s];
                *dst = mx > *dst ? mx : *dst; /* blocks over SC_SUB keys come in several segments */
            }
    }
}

/* GS heads x JV vectors of PW keys (kp[v], key-transposed rows `block` apart): the scores stay in registers
 * and each vector's maximum over its first valid[v] keys is folded into scores[g * hs + blk[v]]. */
PTARGET KN_INLINE void PFN(ichunk)(int GS, int JV, const float *q, int32_t dim, const PKT *const *kp,
                                   int64_t block, const int32_t *blk, const int32_t *valid, float *scores,
                                   int64_t hs)
{
    PVEC acc[4][4];
    for (int i = 0; i < GS; i++)
        for (int v = 0; v < JV; v++) acc[i][v] = (PVEC){0};
    for (int32_t d = 0; d < dim; d++) {
        PVEC kv[4];
        for (int v = 0; v < JV; v++) kv[v] = PLD(kp[v] + d * block);
        for (int i = 0; i < GS; i++) {
            float qd = q[i * dim + d];
            for (int v = 0; v < JV; v++) acc[i][v] += kv[v] * qd;
        }
    }
    for (int i = 0; i < GS; i++)
        for (int v = 0; v < JV; v++) {
            float mx = PFN(vmax)(acc[i][v], valid[v]);
            float *dst = scores + i * hs + blk[v];
            *dst = mx > *dst ? mx : *dst;
        }
}

/* Block scores when a page row is whole vectors (block a multiple of PW): every visible vector of keys is
 * listed (page, block, visible lanes), then scored for up to 4 heads at a time, 4 vectors per tile. */
PTARGET KN_INLINE void PFN(ilist)(const float *q, int32_t nh, int32_t dim, const PKT *const *kp,
                                  int64_t block, const int32_t *blk, const int32_t *valid, int32_t nv,
                                  float *scores, int64_t hs)
{
    for (int32_t g = 0; g < nh;) {
        int gs = nh - g >= 4 ? 4 : nh - g >= 2 ? 2 : 1;
        const float *qg = q + (int64_t)g * dim;
        float *sg = scores + g * hs;
        int32_t v = 0;
        if (gs == 4) {
            for (; v + 2 <= nv; v += 2) PFN(ichunk)(4, 2, qg, dim, kp + v, block, blk + v, valid + v, sg, hs);
            for (; v < nv; v++) PFN(ichunk)(4, 1, qg, dim, kp + v, block, blk + v, valid + v, sg, hs);
        } else if (gs == 2) {
            for (; v + 4 <= nv; v += 4) PFN(ichunk)(2, 4, qg, dim, kp + v, block, blk + v, valid + v, sg, hs);
            for (; v < nv; v++) PFN(ichunk)(2, 1, qg, dim, kp + v, block, blk + v, valid + v, sg, hs);
        } else {
            for (; v + 4 <= nv; v += 4) PFN(ichunk)(1, 4, qg, dim, kp + v, block, blk + v, valid + v, sg, hs);
            for (; v < nv; v++) PFN(ichunk)(1, 1, qg, dim, kp + v, block, blk + v, valid + v, sg, hs);
        }
        g += gs;
    }
}

/* Block scores when a page row is whole vectors (block a multiple of PW): every visible vector of keys is
 * listed (its page row, block, visible lanes), then scored for up to 4 heads at a time, several vectors per
 * tile, and reduced to the block maximum in registers. */
PTARGET static void PFN(iscores_v)(const float *q, int32_t nh, int32_t dim, int64_t pos, const PKT *idx,
                                   int32_t block, const int32_t *bt, float *scores, int64_t hs,
                                   int32_t n_blocks)
{
    enum { LIST = 64 };
    const PKT *kp[LIST];
    int32_t blk[LIST], valid[LIST], nv = 0;
    for (int32_t b = 0; b < n_blocks; b++) {
        for (int32_t g = 0; g < nh; g++) scores[g * hs + b] = -INFINITY;
        int64_t t0 = (int64_t)b * block;
        if (t0 > pos) continue;
        int64_t jn = pos - t0 + 1 < block ? pos - t0 + 1 : block;
        const PKT *ib = idx + (int64_t)bt[b] * dim * block;
        for (int64_t j = 0; j < jn; j += PW) {
            if (nv == LIST) {
                PFN(ilist)(q, nh, dim, kp, block, blk, valid, nv, scores, hs);
                nv = 0;
            }
            kp[nv] = ib + j;
            blk[nv] = b;
            valid[nv++] = (int32_t)(jn - j < PW ? jn - j : PW);
        }
    }
    if (nv) PFN(ilist)(q, nh, dim, kp, block, blk, valid, nv, scores, hs);
}

PTARGET static void PFN(iscores)(const float *q, int32_t nh, int32_t dim, int64_t pos, const PKT *idx,
                                 int32_t block, const int32_t *bt, float *scores, int64_t hs,
                                 int32_t n_blocks)
{
    float sc[KN_PATTN_G * SC_STRIDE];
    struct PFN(seg) sg[SC_SUB];
    int32_t blk[SC_SUB], ns = 0, n = 0;
    for (int32_t b = 0; b < n_blocks; b++) {
        for (int32_t g = 0; g < nh; g++) scores[g * hs + b] = -INFINITY;
        int64_t t0 = (int64_t)b * block;
        if (t0 > pos) continue;
        int64_t jn = pos - t0 + 1 < block ? pos - t0 + 1 : block;
        const PKT *ib = idx + (int64_t)bt[b] * dim * block;
        for (int64_t j0 = 0; j0 < jn; j0 += SC_SUB) {
            int32_t len = (int32_t)(jn - j0 < SC_SUB ? jn - j0 : SC_SUB);
            if (n + len > SC_SUB) {
                PFN(iflush)(q, nh, dim, sg, blk, ns, block, sc, scores, hs);
                ns = n = 0;
            }
            blk[ns] = b;
            sg[ns++] = (struct PFN(seg)){ib, NULL, (int32_t)j0, len, n};
            n += len;
        }
    }
    PFN(iflush)(q, nh, dim, sg, blk, ns, block, sc, scores, hs);
}

#undef PW
#undef PVEC
#undef PVECI
#undef PLANES
#undef PVECU
#undef PKT
#undef PLD
#undef PCV1
#undef PFN
#undef PTARGET
#undef PFMA
