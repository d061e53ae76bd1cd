/* The plugin loader and the host services lent to plugins.
 *
 * A plugin is named either by a built-in name ("m3" -> <plugin dir>/m3.so) or by a path to a .so file
 * (anything containing '/' or ending in ".so"). The plugin dir is, in order: the dir argument, the
 * MMGW_PLUGIN_DIR environment variable, then "../plugins" next to the running executable's folder
 * (build/bin/mmgw-x -> build/plugins).
 *
 * Loading dlopen()s the file with RTLD_NOW|RTLD_LOCAL, calls mmgw_plugin_entry(host) and validates what it
 * returns before anything else touches it: the ABI major must equal the host's, the minor must not be newer
 * than the host's, struct_size must cover every member of the plugin's minor version, and every required
 * member must be set. A refusal is MM_ABI (or MM_NOT_FOUND / MM_IO for a missing file or symbol) with a
 * one-line message naming the file and both versions.
 *
 * The loaded plugin's table is copied into gw_plugin.vt, zero-filled past the plugin's struct_size, so
 * the host may read any member it knows and find NULL for members a plugin predates. Optional members the
 * host fills in with defaults: parser_* (no parser: text passes through) and bos_token (none).
 *
 * Thread safety: loading and unloading are not thread-safe with respect to the same plugin; a loaded
 * plugin and its instances follow plugin.h's threading rules. */
#ifndef GW_PLUGIN_H
#define GW_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <mmgw/plugin.h>

#include "mm_status.h"

/** The error sink plugins fill through host->set_error (opaque to plugins). */
struct mmgw_error {
    struct mm_err e;
};

/** A loaded plugin. Members are read-only for users. */
struct gw_plugin {
    struct mmgw_plugin vt; /* the plugin's table, zero-extended to the host's size */
    char path[4096];       /* the file it was loaded from */
    void *dl;              /* dlopen handle */
};

/** The host services table handed to every plugin (static; lives for the process). */
const struct mmgw_host_api *gw_plugin_host_api(void);

/** The default plugin directory: $MMGW_PLUGIN_DIR, else <dir of /proc/self/exe>/../plugins. Writes a
 * NUL-terminated path into buf; returns 0, or -1 when it cannot be found or does not fit. */
int gw_plugin_default_dir(char *buf, size_t cap);

/** Resolve a plugin name to a file path: a built-in name ([a-z0-9_]+) becomes <dir>/<name>.so (dir NULL =
 * the default dir); a path is used as is. Returns 0 or MM_INVALID / MM_NOT_FOUND with err set. */
int32_t gw_plugin_resolve(const char *name_or_path, const char *dir, char *out, size_t cap,
                          struct mm_err *err);

/** Load and validate a plugin. On success *out owns the dlopen handle (gw_plugin_unload releases it). */
int32_t gw_plugin_load(const char *name_or_path, const char *dir, struct gw_plugin **out, struct mm_err *err);

/** dlclose the plugin and free the handle. Every instance must be destroyed first. NULL is fine. */
void gw_plugin_unload(struct gw_plugin *p);

/** Create an instance from "key value" options (e.g. from `plugin_option` lines). On failure *out is NULL
 * and err carries the plugin's message prefixed with the plugin name. */
int32_t gw_plugin_instance_create(const struct gw_plugin *p, const struct mmgw_option *options,
                                  uint32_t n_options, struct mmgw_plugin_instance **out, struct mm_err *err);
void gw_plugin_instance_destroy(const struct gw_plugin *p, struct mmgw_plugin_instance *inst);

/** Validate a plugin table as the loader does (exposed for tests). label names the file in messages. */
int32_t gw_plugin_validate(const struct mmgw_plugin *vt, const char *label, struct mm_err *err);

#endif
