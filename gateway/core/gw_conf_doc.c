/* docs/config.md, generated from the directive tables (`mmgw --dump-directives`). */
#include "gw_conf.h"

#include <string.h>

static const char *context_names(uint32_t flags, char *buf, size_t size)
{
    static const struct {
        uint32_t bit;
        const char *name;
    } ctx[] = {
        {GW_CTX_MAIN, "main"}, {GW_CTX_HTTP, "http"}, {GW_CTX_MODEL, "model"}, {GW_CTX_MEDIA, "media"}};
    buf[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < sizeof ctx / sizeof ctx[0]; i++) {
        if (!(flags & ctx[i].bit)) continue;
        int n = snprintf(buf + used, size - used, "%s%s", used ? ", " : "", ctx[i].name);
        if (n > 0 && (size_t)n < size - used) used += (size_t)n;
    }
    return buf;
}

void gw_conf_dump_markdown(FILE *f)
{
    fputs(
        "# mmgw configuration directives\n\n"
        "Generated from the directive tables in `gateway/core/gw_conf_directives.c` by "
        "`mmgw --dump-directives`; do not edit by hand (a test checks it is current).\n\n"
        "Syntax (nginx's): `name arg ...;` or `name arg ... { ... }`, `#` comments, quoted strings "
        "(\"...\" or '...'), `include PATTERN;` (a glob relative to the including file, allowed everywhere). "
        "Sizes: `512`, `16k`, `64m`, `1g`. "
        "Times: `500ms`, `10s`, `5m`, `1h`, `1d`, `1m30s` (parts in falling units, each once); "
        "a bare number is seconds. "
        "Relative paths are resolved against the directory of the file that contains them.\n\n"
        "Check a file with `mmgw -t -c FILE`.\n",
        f);
    static const char *const titles[] = {"Top level", "http", "model", "media"};
    for (size_t t = 0; gw_conf_tables[t]; t++) {
        fprintf(f, "\n## %s\n", t < 4 ? titles[t] : "more");
        for (const struct gw_directive *d = gw_conf_tables[t]; d->name; d++) {
            char ctx[64];
            fprintf(f, "\n### %s\n\n", d->name);
            fprintf(f, "- Syntax: `%s%s%s%s`\n", d->name, d->syntax && *d->syntax ? " " : "",
                    d->syntax ? d->syntax : "", (d->flags & GW_CONF_BLOCK) ? "" : ";");
            fprintf(f, "- Default: %s%s%s\n", d->deflt ? "`" : "", d->deflt ? d->deflt : "none",
                    d->deflt ? "`" : "");
            fprintf(f, "- Context: %s%s\n", context_names(d->flags, ctx, sizeof ctx),
                    (d->flags & GW_CONF_MULTI) ? " (repeatable)" : "");
            if (d->max > d->min) {
                if (d->set == gw_conf_set_msec)
                    fprintf(f, "- Range: %lld ms to %lld ms\n", (long long)d->min, (long long)d->max);
                else if (d->set == gw_conf_set_size)
                    fprintf(f, "- Range: %lld to %lld bytes\n", (long long)d->min, (long long)d->max);
                else
                    fprintf(f, "- Range: %lld to %lld\n", (long long)d->min, (long long)d->max);
            }
            fprintf(f, "\n%s\n", d->help ? d->help : "");
        }
    }
}
