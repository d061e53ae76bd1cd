/* Structural edits of a JSON document for the corpus replays (tests/fuzz/chat, tests/fuzz/api): every
 * container slot (an object member or an array element) listed, then one slot deleted, duplicated (arrays)
 * or replaced by a value the caller makes. The caller draws the slot and the operation from its own
 * deterministic generator, so each replay keeps its fixed sequence of mutations. */
#ifndef FUZZ_JSON_EDIT_H
#define FUZZ_JSON_EDIT_H

#include <stddef.h>

#include <jansson.h>

struct fz_json_slot {
    json_t *parent;
    const char *key; /* the member's key, or NULL for array element index */
    size_t index;
};

/** The slots of root, depth first, at most cap; returns how many. */
size_t fz_json_slots(json_t *root, struct fz_json_slot *slots, size_t cap);

/** op 0: delete the slot; 1: (arrays) insert a copy of the element before it; else: replace it with value().
 */
void fz_json_edit(const struct fz_json_slot *s, unsigned op, json_t *(*value)(void));

#endif
