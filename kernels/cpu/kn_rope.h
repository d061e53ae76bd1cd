/* Rotary position embeddings, rotate-half layout, driven by cos/sin tables.
 *
 * A table row holds one angle per rotated dim, laid out as the reference builds it: cat(freqs, freqs) for
 * text, cat([t*f, h*f, w*f], [t*f, h*f, w*f]) for the vision tower. Applying the first r entries of a row
 * rotates dims [0, r) of a head (x[j] pairs with x[j +- r/2]) and passes the rest through, exactly as the
 * reference's apply_rotary_pos_emb does with a truncated table (the MSA index branch with a smaller
 * index_head_dim uses that). */
#ifndef KN_ROPE_H
#define KN_ROPE_H

#include <stdint.h>

/** Text RoPE tables for n positions: cos/sin [n][rot_dim], angles pos * theta^(-2i/rot_dim) evaluated in
 * fp32 as the reference does (it forces fp32 for these angles even in an fp64 model). */
void kn_rope_text_table(const int64_t *pos, int64_t n, int32_t rot_dim, double theta, float *cos_t,
                        float *sin_t);

/** Vision 3-D RoPE: per-axis dims for a head of head_dim (2 * ((2 * (head_dim / 2) / 3) / 2)). */
int32_t kn_rope_vision_axis_dim(int32_t head_dim);

/** Vision tables for one item of grid (t, h, w) in the reference patch order (t, h/m, w/m, m, m):
 * cos/sin [t*h*w][3 * axis_dim]. h and w must be multiples of merge. */
void kn_rope_vision_table(int64_t t, int64_t h, int64_t w, int32_t merge, int32_t head_dim, double theta,
                          float *cos_t, float *sin_t);

/** Rotate n rows of n_heads heads in place: the first rot dims of each head with table row i (table rows
 * table_stride apart; rot <= table_stride, rot even, rot <= head_dim). Heads are head_dim apart inside a row,
 * rows stride apart. */
void kn_rope_apply(float *x, int64_t n, int32_t n_heads, int32_t head_dim, int64_t stride, const float *cos_t,
                   const float *sin_t, int32_t table_stride, int32_t rot);

#endif
