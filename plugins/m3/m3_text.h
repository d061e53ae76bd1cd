/* Text helpers of the M3 plugin's chat half: a growable byte buffer on the host allocator, and the number
 * and JSON spellings the reference engines use.
 *
 * Two spellings matter:
 *  - Python (the chat template runs in Jinja): `str(float)` / `repr(float)` and `json.dumps` with `", "` and
 *    `": "` separators and non-ASCII kept (HF's `tojson`).
 *  - serde_json (vLLM's Rust tool parser builds the arguments JSON): compact, floats spelled by ryu.
 * Both print the shortest decimal that reads back to the same double; they differ only in layout. */
#ifndef M3_TEXT_H
#define M3_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <mmgw/plugin.h>

/** A byte buffer that grows through host->alloc. Appends never fail loudly: the first allocation
 * failure sets `oom` and later appends do nothing, so a caller checks once at the end. */
struct m3_buf {
    const struct mmgw_host_api *host;
    char *p;
    size_t len, cap;
    int oom;
};

void m3_buf_init(struct m3_buf *b, const struct mmgw_host_api *host);
void m3_buf_free(struct m3_buf *b);
/** Room for n more bytes at once (an estimate of the output: one allocation instead of a doubling series). */
void m3_buf_reserve(struct m3_buf *b, size_t n);
void m3_buf_put(struct m3_buf *b, const void *data, size_t n);
void m3_buf_puts(struct m3_buf *b, const char *s);
void m3_buf_putc(struct m3_buf *b, char c);
/** Drop everything from byte `len` on. */
void m3_buf_truncate(struct m3_buf *b, size_t len);
/** Remove the first n bytes (a consumed prefix). */
void m3_buf_consume(struct m3_buf *b, size_t n);

/** Python `repr(x)` of a float: `1.5`, `100000.0`, `1e-05`, `1e+16`, `-0.0`. */
void m3_fmt_py_float(struct m3_buf *b, double x);
/** serde_json / ryu spelling of a finite float: `1.5`, `100000.0`, `1e-7`, `1e16`, `-0.0`. */
void m3_fmt_serde_float(struct m3_buf *b, double x);

/** A JSON string literal (with quotes): `"` `\` and control characters escaped (`\n` `\t` `\r` `\b` `\f`,
 * else `\u00xx`), non-ASCII kept. Invalid UTF-8 becomes U+FFFD so the result is always valid JSON. This is
 * what Python's json.dumps(ensure_ascii=False) and serde_json both write. */
void m3_fmt_json_string(struct m3_buf *b, const char *s, size_t n);

/** Python's `json.dumps(v, ensure_ascii=False)`: separators `", "` / `": "`, key order kept. Returns
 * MMGW_OK, or MMGW_E_INVALID when v nests deeper than max_depth. */
int32_t m3_dump_py_json(struct m3_buf *b, const json_t *v, int max_depth);
/** serde_json's compact `to_string`: `{"k":1,"a":[true,null]}`. Returns MMGW_OK or MMGW_E_INVALID (too
 * deep). */
int32_t m3_dump_serde_json(struct m3_buf *b, const json_t *v, int max_depth);

/** Jinja's `{{ v }}` of a scalar (Python `str()`): strings raw, `True`/`False`/`None`, numbers as Python
 * prints them. Returns MMGW_E_UNSUPPORTED for arrays and objects (their Python repr is not rendered). */
int32_t m3_put_py_str(struct m3_buf *b, const json_t *v);

/** Copy at most cap - 1 bytes of [s, s + n) into dst for an error message: control characters become '?',
 * so a message stays on one line whatever the request held. Returns dst. */
char *m3_printable(char *dst, size_t cap, const char *s, size_t n);

/** Jinja truthiness of a JSON value (NULL = undefined): false for undefined, null, false, 0, 0.0, "", [],
 * {}. */
int m3_json_truthy(const json_t *v);

/** Rust `char::is_whitespace` on the code point starting at s[0] (n bytes available): returns its byte
 * length if it is Unicode White_Space, else 0. */
size_t m3_unicode_space_len(const char *s, size_t n);
/** Rust `str::trim`: strip Unicode White_Space from both ends of [*s, *s + *n). */
void m3_trim_unicode(const char **s, size_t *n);

#endif
