/* A small deterministic byte-level BPE trainer for mmgw-mktokenizer: count pre-tokens, then repeatedly
 * merge the most frequent adjacent pair (ties: the pair of lowest ids), as HF's BpeTrainer does in
 * spirit. Symbols are token ids; ids 0..255 are the byte tokens, merge i creates id 256 + i. */
#ifndef MKT_TRAIN_H
#define MKT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

struct mkt_trainer;

struct mkt_trainer *mkt_trainer_create(void);
void mkt_trainer_destroy(struct mkt_trainer *t);
/** Count one pre-token (bytes already mapped to byte-token ids 0..255 by byte_id). */
int32_t mkt_trainer_add_word(struct mkt_trainer *t, const uint8_t *s, size_t n, const uint16_t byte_id[256],
                             struct mm_err *err);
/** Learn up to max_merges merges with a pair count of at least min_count. On success *left / *right
 * (malloc'd, *n_merges entries, caller frees) give each merge's two token ids. */
int32_t mkt_trainer_run(struct mkt_trainer *t, size_t max_merges, uint64_t min_count, uint32_t **left,
                        uint32_t **right, size_t *n_merges, struct mm_err *err);

#endif
