/* The mmgw binary: the server core plus the modules registered through the MMGW_GATEWAY_MODULES CMake
 * property (see gw_module.h); gw_modules.c is generated from it. */
#include "gw_module.h"
#include "mm_json.h"

extern const struct gw_module *const gw_builtin_modules[];

int main(int argc, char **argv)
{
    /* before any JSON value exists: request handlers parse into their request's arena (mm_json.h) */
    mm_json_alloc_install();
    return gw_server_main(argc, argv, gw_builtin_modules);
}
