/* The k largest of a stream of values, kept in a sorted array by insertion: for small k (top
 * log-probabilities, MSA block selection, MoE routing), one pass over the values and no sort. */
#ifndef MM_TOPK_H
#define MM_TOPK_H

#include <stdint.h>

/** Offer value v (with its id) to vals / ids [0, *have), sorted descending, holding at most k >= 1 entries:
 * v goes in before the first smaller value (so among equal values the first offered stays first) and the
 * smallest falls out when the array is full. A NaN never enters a full array. */
static inline void mm_topk_offer(float *vals, int32_t *ids, int32_t *have, int32_t k, float v, int32_t id)
{
    if (*have == k && !(v > vals[k - 1])) return;
    int32_t at = *have < k ? (*have)++ : k - 1;
    while (at > 0 && v > vals[at - 1]) {
        vals[at] = vals[at - 1];
        ids[at] = ids[at - 1];
        at--;
    }
    vals[at] = v;
    ids[at] = id;
}

#endif
