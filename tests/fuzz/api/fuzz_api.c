/* libFuzzer target: a request body through the OpenAI handling before the worker (build with
 * -DMMGW_FUZZ=ON and clang; see CMakeLists.txt here). */
#include "api_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    api_fuzz_body(data, size);
    return 0;
}
