/* Test driver for differential tests against the Python reference: one JSON value per input line.
 *   tok_cli TOKENIZER.json encode [add_special]   lines of JSON strings  -> JSON arrays of ids
 *   tok_cli TOKENIZER.json decode [skip_special]  lines of JSON id arrays -> JSON strings
 * Errors print {"error": "..."} for that line and continue. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_tokenizer.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER.json encode|decode [flag]\n", argv[0]);
        return 2;
    }
    struct gw_tokenizer *tok;
    struct mm_err e;
    if (gw_tokenizer_load_file(argv[1], &tok, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    int decode = strcmp(argv[2], "decode") == 0;
    uint32_t flags = argc > 3 && atoi(argv[3]) ? (decode ? GW_TOK_SKIP_SPECIAL : GW_TOK_ADD_SPECIAL) : 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    struct gw_tok_ids ids = {0};
    struct mm_buf out;
    mm_buf_init(&out, 0);
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_error_t je;
        json_t *v = json_loadb(line, (size_t)n, JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
        json_t *res = NULL;
        if (!v) {
            res = json_pack("{s:s}", "error", je.text);
        } else if (!decode) {
            ids.n = 0;
            if (gw_tokenizer_encode(tok, json_string_value(v), json_string_length(v), flags, &ids, &e)) {
                res = json_pack("{s:s}", "error", e.msg);
            } else {
                res = json_array();
                for (size_t i = 0; i < ids.n; i++) json_array_append_new(res, json_integer(ids.ids[i]));
            }
        } else {
            size_t k = json_array_size(v);
            uint32_t *a = calloc(k + 1, sizeof *a);
            for (size_t i = 0; i < k; i++) a[i] = (uint32_t)json_integer_value(json_array_get(v, i));
            out.len = 0;
            if (gw_tokenizer_decode(tok, a, k, flags, &out, &e))
                res = json_pack("{s:s}", "error", e.msg);
            else
                res = json_stringn(out.data ? out.data : "", out.len);
            free(a);
        }
        char *s = json_dumps(res, JSON_ENCODE_ANY | JSON_COMPACT);
        puts(s ? s : "{\"error\": \"dump\"}");
        free(s);
        json_decref(res);
        json_decref(v);
    }
    free(line);
    mm_buf_free(&out);
    gw_tok_ids_free(&ids);
    gw_tokenizer_free(tok);
    return 0;
}
