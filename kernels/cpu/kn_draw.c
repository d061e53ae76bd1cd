/* The draw from a row without top-k (kn_draw.h): the passes kn_cuda_topk_cands makes, one thread. */
#include "kn_draw.h"

#include <math.h>
#include <string.h>

uint32_t kn_draw_key(float v, float m, float t)
{
    if (isnan(v)) return 0;
    const double x = ((double)v - (double)m) / (double)t; /* wk_sample's arithmetic */
    if (x < -28.5) return 0;
    const float p = (float)exp(x);
    if (!(p >= 1e-12f)) return 0;
    uint32_t key;
    memcpy(&key, &p, sizeof key);
    return key;
}

uint64_t kn_draw_mass(uint32_t key)
{
    float p;
    memcpy(&p, &key, sizeof p);
    return (uint64_t)((double)p * MM_DRAW_ONE);
}

/* A set of keyed tokens: key > kb, or key == kb at id <= idc (a prefix of the order key descending, id
 * ascending) */
struct kset {
    uint32_t kb;
    int32_t idc;
};

static int in_set(uint32_t key, int32_t id, const struct kset *s)
{
    return key > s->kb || (key == s->kb && id <= s->idc);
}

/* The first token of set s, in order, whose running weight exceeds target (target clamped below the set's
 * weight): 4 rounds of a 256-bin histogram of weights and counts over the key's bytes, high to low, then
 * the ties of its key in id order. *cum: the running weight through it. -1 for an empty set. */
static int32_t first_over(const uint32_t *keys, int32_t n, const struct kset *s, uint64_t target,
                          uint32_t *key_out, uint64_t *cum)
{
    uint32_t prefix = 0, mask = 0, ties = 0;
    uint64_t above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint64_t hm[256] = {0};
        uint32_t hc[256] = {0};
        for (int32_t i = 0; i < n; i++) {
            const uint32_t key = keys[i];
            if (!key || (key & mask) != prefix || !in_set(key, i, s)) continue;
            hm[(key >> shift) & 255] += kn_draw_mass(key);
            hc[(key >> shift) & 255]++;
        }
        if (shift == 24) {
            uint64_t total = 0;
            for (int d = 0; d < 256; d++) total += hm[d];
            if (!total) return -1;
            if (target >= total) target = total - 1;
        }
        int d = 255;
        for (; d > 0; d--) { /* above <= target < above + this prefix's weight: some bin holds it */
            if (hc[d] && above + hm[d] > target) break;
            above += hm[d];
        }
        prefix |= (uint32_t)d << shift;
        mask |= 255u << shift;
        ties = hc[d];
    }
    const uint64_t per = kn_draw_mass(prefix);
    uint64_t j = (target - above) / per + 1;
    if (j > ties) j = ties;
    uint64_t c = 0;
    for (int32_t i = 0; i < n; i++)
        if (keys[i] == prefix && in_set(prefix, i, s) && ++c == j) {
            *key_out = prefix;
            *cum = above + j * per;
            return i;
        }
    return -1;
}

int32_t kn_draw(const float *x, int32_t n, const struct mm_cand_req *r, uint32_t *keys)
{
    if (n <= 0 || n > MM_DRAW_MAX_VOCAB || !r->draw || !(r->t > 0.0f)) return -1;
    float m = -INFINITY;
    int32_t nv = 0;
    for (int32_t i = 0; i < n; i++)
        if (!isnan(x[i])) {
            nv++;
            if (x[i] > m) m = x[i];
        }
    if (nv == 0 || !isfinite(m) || r->k < nv) return -1;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += kn_draw_mass(keys[i] = kn_draw_key(x[i], m, r->t));
    struct kset s = {0, -1}; /* every token kept */
    uint64_t weight = total;
    const int top_p = r->top_p > 0.0f && r->top_p<1.0f, min_p = r->min_p> 0.0f;
    uint32_t kp = 0;
    uint64_t cum_p = 0;
    int32_t idp = -1;
    if (top_p) {
        const uint64_t tp = (uint64_t)((double)r->top_p * (double)total);
        idp = first_over(keys, n, &s, tp ? tp - 1 : 0, &kp, &cum_p);
    }
    if (min_p) {
        uint32_t mk; /* p >= min_p (the first token's p is 1) */
        memcpy(&mk, &r->min_p, sizeof mk);
        uint64_t wm = 0;
        for (int32_t i = 0; i < n; i++)
            if (keys[i] >= mk) wm += kn_draw_mass(keys[i]);
        if (!wm) { /* none: the first token alone */
            uint32_t k1;
            uint64_t c1;
            return first_over(keys, n, &s, 0, &k1, &c1);
        }
        if (!top_p || mk > kp) {
            s.kb = mk - 1, s.idc = -1, weight = wm;
        } else {
            s.kb = kp, s.idc = idp, weight = cum_p;
        }
    } else if (top_p) {
        s.kb = kp, s.idc = idp, weight = cum_p;
    }
    const double u = r->u > 0.0 ? r->u : 0.0;
    uint64_t tu = (uint64_t)(u * (double)weight);
    if (tu >= weight) tu = weight - 1;
    uint32_t ku;
    uint64_t cu;
    return first_over(keys, n, &s, tu, &ku, &cu);
}
