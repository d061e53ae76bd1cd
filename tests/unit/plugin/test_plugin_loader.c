/* The plugin loader: both real plugins load through the ABI from the default plugin dir and by path; every
 * deliberately broken plugin in tests/plugins is refused with a one-line message naming the file and both
 * ABI versions; instances reject unknown options by name. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gw_plugin.h"
#include "mmgw_test.h"

#ifndef TEST_PLUGIN_DIR
#error "TEST_PLUGIN_DIR must point at build/tests/plugins"
#endif

static char host_version[32];

static void expect_refused(const char *file, int32_t code, const char *needle)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", TEST_PLUGIN_DIR, file);
    struct gw_plugin *p = NULL;
    struct mm_err err = {0};
    int32_t rc = gw_plugin_load(path, NULL, &p, &err);
    CHECK_MSG(rc == code, "%s: rc %d (%s), want %d: %s", file, rc, mm_status_name(rc), code, err.msg);
    CHECK(p == NULL);
    CHECK_MSG(strstr(err.msg, path) != NULL, "%s: message does not name the file: %s", file, err.msg);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", file, needle, err.msg);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "%s: message is not one line", file);
    if (code == MM_ABI)
        CHECK_MSG(strstr(err.msg, host_version) != NULL, "%s: message lacks the host ABI %s: %s", file,
                  host_version, err.msg);
    printf("refused %-18s %s\n", file, err.msg);
}

static void check_real_plugin(const char *name, const char *model_type, const char *marker)
{
    struct gw_plugin *p = NULL;
    struct mm_err err = {0};
    int32_t rc = gw_plugin_load(name, NULL, &p, &err);
    CHECK_MSG(rc == MM_OK, "load %s: %s", name, err.msg);
    if (rc) return;
    CHECK_STR(p->vt.name, name);
    CHECK(p->vt.abi_major == MMGW_PLUGIN_ABI_MAJOR);
    CHECK(p->vt.match_model_type(model_type) == 1);
    CHECK(p->vt.match_model_type("llama") == 0);
    CHECK(p->vt.match_model_type(NULL) == 0);

    struct mmgw_plugin_instance *inst = NULL;
    rc = gw_plugin_instance_create(p, NULL, 0, &inst, &err);
    CHECK_MSG(rc == MM_OK && inst, "create %s: %s", name, err.msg);
    if (inst) {
        const struct mmgw_vision_params *vp = p->vt.vision_params(inst);
        CHECK(vp && vp->patch_size == 14 && vp->merge_size == 2 && vp->temporal_patch_size == 2);
        CHECK_STR(p->vt.media_marker(inst, MMGW_MEDIA_IMAGE), marker);
        uint32_t oh = 0, ow = 0;
        struct mmgw_error perr = {{0, ""}};
        /* 448x448 -> 448x448 (grid 32x32, 256 tokens): the Qwen2-VL worked example. */
        CHECK(p->vt.smart_resize(inst, MMGW_MEDIA_IMAGE, 448, 448, 1, &oh, &ow, &perr) == MMGW_OK);
        CHECK(oh == 448 && ow == 448);
        CHECK_EQ_INT(p->vt.num_placeholder_tokens(inst, MMGW_MEDIA_IMAGE, 1, 32, 32), 256);
        /* an aspect ratio over 200 is refused, with a message */
        CHECK(p->vt.smart_resize(inst, MMGW_MEDIA_IMAGE, 10, 2010, 1, &oh, &ow, &perr) == MMGW_E_INVALID);
        CHECK(strstr(perr.e.msg, "200") != NULL);
        gw_plugin_instance_destroy(p, inst);
    }
    /* unknown options are refused by name */
    struct mmgw_option opt = {"no_such_option", "1"};
    inst = NULL;
    rc = gw_plugin_instance_create(p, &opt, 1, &inst, &err);
    CHECK(rc == MM_INVALID && inst == NULL);
    CHECK_MSG(strstr(err.msg, "no_such_option") != NULL, "%s", err.msg);
    gw_plugin_unload(p);
}

int main(void)
{
    snprintf(host_version, sizeof host_version, "%u.%u", MMGW_PLUGIN_ABI_MAJOR, MMGW_PLUGIN_ABI_MINOR);

    /* the built-in names resolve through the default dir (build/tests/../plugins) */
    check_real_plugin("m3", "minimax_m3_vl", "]<]image[>[");
    check_real_plugin("qwen2vl", "qwen2_vl", "<|image_pad|>");

    /* and by path */
    char dir[1024], path[1100];
    CHECK(gw_plugin_default_dir(dir, sizeof dir) == 0);
    snprintf(path, sizeof path, "%s/m3.so", dir);
    struct gw_plugin *p = NULL;
    struct mm_err err = {0};
    CHECK_MSG(gw_plugin_load(path, NULL, &p, &err) == MM_OK, "%s", err.msg);
    if (p) CHECK_STR(p->path, path);
    gw_plugin_unload(p);

    /* a valid plugin leaving optional members NULL gets host defaults */
    snprintf(path, sizeof path, "%s/valid_minimal.so", TEST_PLUGIN_DIR);
    p = NULL;
    CHECK_MSG(gw_plugin_load(path, NULL, &p, &err) == MM_OK, "%s", err.msg);
    if (p) {
        CHECK(p->vt.bos_token != NULL && p->vt.bos_token(NULL) == NULL);
        struct mmgw_output_parser *parser = (struct mmgw_output_parser *)&err;
        CHECK(p->vt.parser_create(NULL, "{}", 2, "", 0, &parser, NULL) == MMGW_OK && parser == NULL);
        struct mmgw_plugin_instance *inst = NULL;
        CHECK(gw_plugin_instance_create(p, NULL, 0, &inst, &err) == MMGW_E_UNSUPPORTED);
        CHECK(strstr(err.msg, "broken") != NULL && strstr(err.msg, "test plugin") != NULL);
    }
    gw_plugin_unload(p);

    /* deliberately broken plugins */
    expect_refused("bad_major.so", MM_ABI, "major");
    expect_refused("newer_minor.so", MM_ABI, "newer");
    expect_refused("small_struct.so", MM_ABI, "struct_size 40");
    expect_refused("null_member.so", MM_ABI, "'smart_resize'");
    expect_refused("null_entry.so", MM_ABI, "returned NULL");
    expect_refused("no_entry.so", MM_ABI, "no mmgw_plugin_entry");
    expect_refused("does_not_exist.so", MM_NOT_FOUND, "No such file");

    /* a file that is not a shared object at all */
    char tmp[] = "/tmp/mmgw_garbage_XXXXXX.so";
    int fd = mkstemps(tmp, 3);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, "this is not an ELF file\n", 24) == 24);
        close(fd);
        p = NULL;
        CHECK(gw_plugin_load(tmp, NULL, &p, &err) == MM_IO && p == NULL);
        CHECK_MSG(strstr(err.msg, tmp) != NULL, "%s", err.msg);
        unlink(tmp);
    }

    /* names that are neither built-in names nor paths */
    CHECK(gw_plugin_load("M3!", NULL, &p, &err) == MM_INVALID);
    CHECK(gw_plugin_load("", NULL, &p, &err) == MM_INVALID);
    /* a built-in name with an explicit directory that lacks it */
    CHECK(gw_plugin_load("m3", "/nonexistent-dir", &p, &err) == MM_NOT_FOUND);
    CHECK(strstr(err.msg, "/nonexistent-dir/m3.so") != NULL);
    return test_done();
}
