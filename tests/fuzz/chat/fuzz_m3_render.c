/* libFuzzer target: M3 render_chat on arbitrary request bytes (build with -DMMGW_FUZZ=ON and clang). */
#include "chat_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    chat_fuzz_render(data, size);
    return 0;
}
