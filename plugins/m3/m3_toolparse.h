/* Tool-call arguments of M3's output: the element tree the streaming parser builds for one argument, and
 * its conversion to JSON using the tool's JSON schema, with the rules of vLLM's Rust `parameters.rs`
 * (../shared/docs/M3_CHAT.md §4 "Types come from the tool schema"). */
#ifndef M3_TOOLPARSE_H
#define M3_TOOLPARSE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <mmgw/plugin.h>

#include "m3_text.h"

/** One `NS<name>…NS</name>` element. A leaf has no kids and its text is the value; an element with kids
 * is an object (or an array under an array schema), its non-blank mixed text kept as a `$text` kid. */
struct m3_elem {
    char *name;
    size_t name_len;
    struct m3_buf text;
    struct m3_elem **kids;
    size_t n_kids, cap_kids;
};

/** A new element named [name, name + len), or NULL when out of memory. */
struct m3_elem *m3_elem_new(const struct mmgw_host_api *host, const char *name, size_t len);
/** Free an element and its subtree. */
void m3_elem_free(const struct mmgw_host_api *host, struct m3_elem *e);
/** Append a finished child; returns MMGW_OK or MMGW_E_NOMEM (the child is freed then). */
int32_t m3_elem_add_kid(const struct mmgw_host_api *host, struct m3_elem *parent, struct m3_elem *kid);
/** Called when an element's closing tag is seen: an element with kids and non-blank text gets the text as a
 * last kid named `$text` (more `$` in front while that name is taken). MMGW_OK or MMGW_E_NOMEM. */
int32_t m3_elem_finish(const struct mmgw_host_api *host, struct m3_elem *e);

/** Normalised parameter types of the request's tools. */
struct m3_schemas;
struct m3_tool_schema;

/** Build from the request's `tools` (NULL or not an array: no tools). Tools without a function name are
 * skipped; a later tool with the same name wins. MMGW_OK or MMGW_E_NOMEM. */
int32_t m3_schemas_build(const struct mmgw_host_api *host, const json_t *tools, struct m3_schemas **out);
void m3_schemas_free(struct m3_schemas *s);
/** The tool named [name, name + len), or NULL when unknown (every argument is then untyped). */
const struct m3_tool_schema *m3_schemas_find(const struct m3_schemas *s, const char *name, size_t len);

/** Convert one top-level argument of a call to `tool` (may be NULL) into a new JSON value. MMGW_OK or
 * MMGW_E_NOMEM. */
int32_t m3_convert_argument(const struct m3_tool_schema *tool, const struct m3_elem *arg, json_t **out);

#endif
