/* The config parser's directive tables (nginx ngx_command_t style).
 *
 * Grammar (nginx's): a directive is `name arg... ;`, a block directive `name arg... { ... }`; `#` starts a
 * comment to the end of the line; arguments may be quoted with "..." or '...' (escapes \" \' \\ \n \t);
 * `include PATTERN;` (glob, relative to the including file) is allowed in every context.
 *
 * Each row names a directive, the contexts it is allowed in, its argument count, a setter and the offset
 * of the field it fills in the context's struct (struct gw_config for main, gw_http_conf for http,
 * gw_model_conf for model, gw_media_conf for media). The parser checks context, argument count and
 * duplicates in one place and turns a setter's message into "file:line: "name" directive: message". */
#ifndef GW_CONF_H
#define GW_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gw_config.h"

/* contexts (where a directive may appear) */
#define GW_CTX_MAIN 0x0001u
#define GW_CTX_HTTP 0x0002u
#define GW_CTX_MODEL 0x0004u
#define GW_CTX_MEDIA 0x0008u
#define GW_CTX_ANY 0x000fu
/* argument counts (any combination; GW_CONF_1MORE = one or more) */
#define GW_CONF_NOARGS 0x0100u
#define GW_CONF_TAKE1 0x0200u
#define GW_CONF_TAKE2 0x0400u
#define GW_CONF_TAKE3 0x0800u
#define GW_CONF_1MORE 0x1000u
/* kinds */
#define GW_CONF_BLOCK 0x10000u /* followed by { ... } */
#define GW_CONF_MULTI 0x20000u /* may repeat in one block (lists) */

struct gw_conf_parse;
struct gw_directive;

/** A setter: read the directive's arguments (gw_conf_arg) and store into conf + d->offset. Returns NULL,
 * or a short message (static or from gw_conf_msg) that the parser prefixes with file:line and the name. */
typedef const char *(*gw_conf_set_fn)(struct gw_conf_parse *cf, const struct gw_directive *d, void *conf);

struct gw_directive {
    const char *name;
    uint32_t flags; /* GW_CTX_* | GW_CONF_TAKE* | GW_CONF_BLOCK | GW_CONF_MULTI */
    gw_conf_set_fn set;
    size_t offset;             /* offsetof(context struct, field) */
    int64_t min, max;          /* bounds for numeric setters (ms for times, bytes for sizes) */
    const char *deflt;         /* default as config text (applied through the setter), NULL = none */
    const char *syntax;        /* arguments for the docs: "ADDRESS:PORT [ssl] [http2] [backlog=N]" */
    const char *help;          /* one line for docs/config.md */
    const char *const *values; /* for gw_conf_set_enum: the accepted words, NULL-terminated */
};

/** The tables, each ending with a row whose name is NULL; gw_conf_tables ends with NULL. */
extern const struct gw_directive *const gw_conf_tables[];

/* ---- for setters ---- */

/** Number of arguments of the current directive (not counting its name). */
size_t gw_conf_nargs(const struct gw_conf_parse *cf);
/** Argument i (0-based, not counting the name). */
const char *gw_conf_arg(const struct gw_conf_parse *cf, size_t i);
/** The config being built (its arena owns everything). */
struct gw_config *gw_conf_config(struct gw_conf_parse *cf);
/** A printf-style message in the config arena (for setter returns). */
const char *gw_conf_msg(struct gw_conf_parse *cf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Copy s into the config arena (NULL on out of memory). */
char *gw_conf_strdup(struct gw_conf_parse *cf, const char *s);
/** s resolved against the directory of the file being parsed (copied into the arena). */
char *gw_conf_path(struct gw_conf_parse *cf, const char *s);
/** The file and line of the current directive. */
const char *gw_conf_file(const struct gw_conf_parse *cf);
int32_t gw_conf_line(const struct gw_conf_parse *cf);
/** Append one element of elem_size bytes to an arena array (*arr, *n); returns the new slot (zeroed) or
 * NULL on out of memory. Capacity doubles at powers of two, so no capacity field is needed. */
void *gw_conf_push(struct gw_conf_parse *cf, void *arr_ptr, size_t *n, size_t elem_size);
/** For block setters: the context and struct the block's inside is parsed with. */
void gw_conf_enter_block(struct gw_conf_parse *cf, uint32_t ctx, void *conf);

/* ---- generic setters (offset points at the field type named) ---- */

const char *gw_conf_set_flag(struct gw_conf_parse *cf, const struct gw_directive *d,
                             void *conf); /* bool: on|off */
const char *gw_conf_set_int(struct gw_conf_parse *cf, const struct gw_directive *d,
                            void *conf); /* int32_t in [min,max] */
const char *gw_conf_set_int_auto(struct gw_conf_parse *cf, const struct gw_directive *d,
                                 void *conf); /* int32_t, "auto" = 0 */
const char *gw_conf_set_int64(struct gw_conf_parse *cf, const struct gw_directive *d,
                              void *conf); /* int64_t in [min,max] */
const char *gw_conf_set_size(struct gw_conf_parse *cf, const struct gw_directive *d,
                             void *conf); /* int64_t bytes: 512, 16k, 64m, 1g */
const char *gw_conf_set_msec(struct gw_conf_parse *cf, const struct gw_directive *d,
                             void *conf); /* int64_t ms: 500ms, 10s, 5m, 1h, 1d, 1m30s; bare = s */
const char *gw_conf_set_str(struct gw_conf_parse *cf, const struct gw_directive *d,
                            void *conf); /* const char * */
const char *gw_conf_set_path(struct gw_conf_parse *cf, const struct gw_directive *d,
                             void *conf); /* const char *, resolved */
const char *gw_conf_set_enum(struct gw_conf_parse *cf, const struct gw_directive *d,
                             void *conf); /* int32_t index into d->values */
const char *gw_conf_set_str_list(struct gw_conf_parse *cf, const struct gw_directive *d,
                                 void *conf); /* const char ** + size_t n right after it */

/* value parsers shared with the setters and tests; return 0 or -1 */
int gw_conf_parse_size(const char *s, int64_t *out);
int gw_conf_parse_msec(const char *s, int64_t *out);
/** Parse "host:port", "[v6]:port", "*:port", "port", "localhost:port" into a numeric address. */
int gw_conf_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len);

/** Write docs/config.md (markdown generated from the tables) to f. */
void gw_conf_dump_markdown(FILE *f);

#endif
