/* Structural edits of a JSON document for the corpus replays (see fuzz_json_edit.h). */
#include "fuzz_json_edit.h"

static void collect(json_t *v, struct fz_json_slot *slots, size_t *n, size_t cap)
{
    if (json_is_object(v)) {
        const char *key;
        json_t *val;
        json_object_foreach(v, key, val)
        {
            if (*n < cap) slots[(*n)++] = (struct fz_json_slot){v, key, 0};
            collect(val, slots, n, cap);
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (*n < cap) slots[(*n)++] = (struct fz_json_slot){v, NULL, i};
            collect(json_array_get(v, i), slots, n, cap);
        }
    }
}

size_t fz_json_slots(json_t *root, struct fz_json_slot *slots, size_t cap)
{
    size_t n = 0;
    collect(root, slots, &n, cap);
    return n;
}

void fz_json_edit(const struct fz_json_slot *s, unsigned op, json_t *(*value)(void))
{
    if (s->key) {
        if (op == 0)
            json_object_del(s->parent, s->key);
        else
            json_object_set_new(s->parent, s->key, value());
    } else {
        if (op == 0)
            json_array_remove(s->parent, s->index);
        else if (op == 1)
            json_array_insert(s->parent, s->index, json_array_get(s->parent, s->index));
        else
            json_array_set_new(s->parent, s->index, value());
    }
}
