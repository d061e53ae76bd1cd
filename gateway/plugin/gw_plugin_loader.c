/* dlopen-based plugin loader: find the file, load it, validate its table against the host's ABI. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gw_plugin.h"

/* Bytes of struct mmgw_plugin that each minor version defines: a plugin claiming minor m must have a
 * struct_size of at least min_size[m]. Append one entry per minor. */
#define END_OF(member) (offsetof(struct mmgw_plugin, member) + sizeof(((struct mmgw_plugin *)0)->member))
static const size_t min_size_for_minor[] = {
    END_OF(parser_destroy), /* 1.0 */
    END_OF(parser_tokens),  /* 1.1 */
};
#define N_MINORS (sizeof(min_size_for_minor) / sizeof(min_size_for_minor[0]))

static int is_builtin_name(const char *s)
{
    if (!*s) return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return 0;
    return 1;
}

int gw_plugin_default_dir(char *buf, size_t cap)
{
    const char *env = getenv("MMGW_PLUGIN_DIR");
    if (env && *env) {
        size_t n = strlen(env);
        if (n + 1 > cap) return -1;
        memcpy(buf, env, n + 1);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = '\0';
    char joined[PATH_MAX + 16];
    int len = snprintf(joined, sizeof joined, "%s/../plugins", exe);
    if (len < 0 || (size_t)len >= sizeof joined) return -1;
    char real[PATH_MAX];
    const char *use = realpath(joined, real) ? real : joined;
    size_t ul = strlen(use);
    if (ul + 1 > cap) return -1;
    memcpy(buf, use, ul + 1);
    return 0;
}

int32_t gw_plugin_resolve(const char *name_or_path, const char *dir, char *out, size_t cap,
                          struct mm_err *err)
{
    if (!name_or_path || !*name_or_path) return mm_err_set(err, MM_INVALID, "plugin: empty plugin name");
    size_t nl = strlen(name_or_path);
    int is_path = strchr(name_or_path, '/') || (nl > 3 && strcmp(name_or_path + nl - 3, ".so") == 0);
    if (is_path) {
        if (nl + 1 > cap) return mm_err_set(err, MM_INVALID, "plugin: path too long");
        memcpy(out, name_or_path, nl + 1);
        return MM_OK;
    }
    if (!is_builtin_name(name_or_path))
        return mm_err_set(err, MM_INVALID,
                          "plugin '%s': not a built-in name ([a-z0-9_]+) nor a path to a .so", name_or_path);
    char def[PATH_MAX];
    if (!dir) {
        if (gw_plugin_default_dir(def, sizeof def) != 0)
            return mm_err_set(err, MM_NOT_FOUND,
                              "plugin '%s': cannot find the plugin directory (set MMGW_PLUGIN_DIR)",
                              name_or_path);
        dir = def;
    }
    int len = snprintf(out, cap, "%s/%s.so", dir, name_or_path);
    if (len < 0 || (size_t)len >= cap)
        return mm_err_set(err, MM_INVALID, "plugin '%s': path too long", name_or_path);
    return MM_OK;
}

#define REQUIRE(member)                                                                                      \
    do {                                                                                                     \
        if (!vt->member)                                                                                     \
            return mm_err_set(                                                                               \
                err, MM_ABI, "plugin %s (ABI %u.%u, host ABI %u.%u): required member '%s' is NULL", label,   \
                vt->abi_major, vt->abi_minor, MMGW_PLUGIN_ABI_MAJOR, MMGW_PLUGIN_ABI_MINOR, #member);        \
    } while (0)

int32_t gw_plugin_validate(const struct mmgw_plugin *vt, const char *label, struct mm_err *err)
{
    if (!vt)
        return mm_err_set(err, MM_ABI, "plugin %s: mmgw_plugin_entry returned NULL (host ABI %u.%u)", label,
                          MMGW_PLUGIN_ABI_MAJOR, MMGW_PLUGIN_ABI_MINOR);
    if (vt->abi_major != MMGW_PLUGIN_ABI_MAJOR)
        return mm_err_set(err, MM_ABI, "plugin %s: ABI %u.%u, host ABI %u.%u: the major version differs",
                          label, vt->abi_major, vt->abi_minor, MMGW_PLUGIN_ABI_MAJOR, MMGW_PLUGIN_ABI_MINOR);
    if (vt->abi_minor > MMGW_PLUGIN_ABI_MINOR)
        return mm_err_set(err, MM_ABI,
                          "plugin %s: ABI %u.%u is newer than the host ABI %u.%u: rebuild the host", label,
                          vt->abi_major, vt->abi_minor, MMGW_PLUGIN_ABI_MAJOR, MMGW_PLUGIN_ABI_MINOR);
    size_t need = min_size_for_minor[vt->abi_minor < N_MINORS ? vt->abi_minor : N_MINORS - 1];
    if (vt->struct_size < need)
        return mm_err_set(
            err, MM_ABI,
            "plugin %s: struct_size %u is smaller than the %zu bytes of ABI %u.%u (host ABI %u.%u)", label,
            vt->struct_size, need, vt->abi_major, vt->abi_minor, MMGW_PLUGIN_ABI_MAJOR,
            MMGW_PLUGIN_ABI_MINOR);
    REQUIRE(name);
    if (!is_builtin_name(vt->name) || strlen(vt->name) > 64)
        return mm_err_set(err, MM_ABI,
                          "plugin %s (ABI %u.%u, host ABI %u.%u): bad name (want [a-z0-9_]{1,64})", label,
                          vt->abi_major, vt->abi_minor, MMGW_PLUGIN_ABI_MAJOR, MMGW_PLUGIN_ABI_MINOR);
    REQUIRE(create);
    REQUIRE(destroy);
    REQUIRE(match_model_type);
    REQUIRE(vision_params);
    REQUIRE(smart_resize);
    REQUIRE(sample_frames);
    REQUIRE(num_placeholder_tokens);
    REQUIRE(render_chat);
    REQUIRE(media_marker);
    REQUIRE(expand_media);
    REQUIRE(stop_tokens);
    if (vt->parser_create) {
        REQUIRE(parser_feed);
        REQUIRE(parser_finish);
        REQUIRE(parser_destroy);
    }
    return MM_OK;
}

/* Defaults for optional members. */
static const char *default_bos_token(const struct mmgw_plugin_instance *inst)
{
    (void)inst;
    return NULL;
}

static int32_t default_parser_create(const struct mmgw_plugin_instance *inst, const char *request_json,
                                     uint64_t json_len, const char *prompt_text, uint64_t prompt_len,
                                     struct mmgw_output_parser **out, struct mmgw_error *err)
{
    *out = NULL;
    return MMGW_OK;
}

static int32_t default_parser_feed(struct mmgw_output_parser *p, const char *text, uint64_t len,
                                   struct mmgw_out_sink *sink, struct mmgw_error *err)
{
    return MMGW_E_UNSUPPORTED;
}

static int32_t default_parser_finish(struct mmgw_output_parser *p, struct mmgw_out_sink *sink,
                                     struct mmgw_error *err)
{
    return MMGW_E_UNSUPPORTED;
}

static void default_parser_destroy(struct mmgw_output_parser *p)
{
    (void)p;
}

int32_t gw_plugin_load(const char *name_or_path, const char *dir, struct gw_plugin **out, struct mm_err *err)
{
    *out = NULL;
    char path[4096];
    int32_t rc = gw_plugin_resolve(name_or_path, dir, path, sizeof path, err);
    if (rc) return rc;
    struct stat st;
    if (stat(path, &st) != 0)
        return mm_err_set(err, MM_NOT_FOUND, "plugin %s: %s (host ABI %u.%u)", path, strerror(errno),
                          MMGW_PLUGIN_ABI_MAJOR, MMGW_PLUGIN_ABI_MINOR);
    if (!S_ISREG(st.st_mode)) return mm_err_set(err, MM_INVALID, "plugin %s: not a regular file", path);

    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        return mm_err_set(err, MM_IO, "plugin %s: dlopen failed: %s", path, why ? why : "unknown error");
    }
    dlerror();
    void *sym = dlsym(dl, MMGW_PLUGIN_ENTRY_SYMBOL);
    if (!sym) {
        dlclose(dl);
        return mm_err_set(err, MM_ABI, "plugin %s: no %s symbol: not an mmgw plugin (host ABI %u.%u)", path,
                          MMGW_PLUGIN_ENTRY_SYMBOL, MMGW_PLUGIN_ABI_MAJOR, MMGW_PLUGIN_ABI_MINOR);
    }
    mmgw_plugin_entry_fn entry;
    /* POSIX guarantees data and function pointers convert through dlsym's void *. */
    memcpy(&entry, &sym, sizeof entry);
    const struct mmgw_plugin *vt = entry(gw_plugin_host_api());
    if ((rc = gw_plugin_validate(vt, path, err))) {
        dlclose(dl);
        return rc;
    }
    struct gw_plugin *p = calloc(1, sizeof *p);
    if (!p) {
        dlclose(dl);
        return mm_err_set(err, MM_NOMEM, "plugin %s: out of memory", path);
    }
    size_t n = vt->struct_size < sizeof p->vt ? vt->struct_size : sizeof p->vt;
    memcpy(&p->vt, vt, n);
    p->vt.struct_size = (uint32_t)sizeof p->vt;
    if (!p->vt.bos_token) p->vt.bos_token = default_bos_token;
    if (!p->vt.parser_create) {
        p->vt.parser_create = default_parser_create;
        p->vt.parser_feed = default_parser_feed;
        p->vt.parser_finish = default_parser_finish;
        p->vt.parser_destroy = default_parser_destroy;
    }
    memcpy(p->path, path, strlen(path) + 1);
    p->dl = dl;
    *out = p;
    return MM_OK;
}

void gw_plugin_unload(struct gw_plugin *p)
{
    if (!p) return;
    if (p->dl) dlclose(p->dl);
    free(p);
}

int32_t gw_plugin_instance_create(const struct gw_plugin *p, const struct mmgw_option *options,
                                  uint32_t n_options, struct mmgw_plugin_instance **out, struct mm_err *err)
{
    *out = NULL;
    struct mmgw_error perr = {{MM_OK, ""}};
    int32_t rc = p->vt.create(gw_plugin_host_api(), options, n_options, out, &perr);
    if (rc != MMGW_OK) {
        *out = NULL;
        return mm_err_set(err, rc, "plugin %s: %s", p->vt.name, perr.e.msg[0] ? perr.e.msg : mm_strerror(rc));
    }
    if (!*out) return mm_err_set(err, MM_ERROR, "plugin %s: create returned no instance", p->vt.name);
    return MM_OK;
}

void gw_plugin_instance_destroy(const struct gw_plugin *p, struct mmgw_plugin_instance *inst)
{
    if (p && inst) p->vt.destroy(inst);
}
