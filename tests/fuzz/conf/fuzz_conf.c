/* libFuzzer target: the config parser (lexer, directive dispatch, setters, checks) on arbitrary text.
 * Includes are off, so the input is the whole world. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gw_config *c = NULL;
    struct mm_err err;
    int32_t rc = gw_config_parse_text("fuzz.conf", (const char *)data, size, "/base", false, &c, &err);
    if (rc == MM_OK) {
        if (!c) abort();
        for (size_t i = 0; i < c->n_models; i++)
            if (gw_config_model(c, c->models[i].name) != &c->models[i]) abort();
        gw_config_unref(c);
    } else {
        if (c || strlen(err.msg) == 0) abort(); /* every failure explains itself */
    }
    return 0;
}
