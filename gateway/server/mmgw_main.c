/* The mmgw binary: the server core plus the modules registered through the MMGW_GATEWAY_MODULES CMake
 * property (see gw_module.h); gw_modules.c is generated from it. */
#include "gw_module.h"

extern const struct gw_module *const gw_builtin_modules[];

int main(int argc, char **argv)
{
    return gw_server_main(argc, argv, gw_builtin_modules);
}
