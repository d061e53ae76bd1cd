/* libFuzzer target: the M3 streaming output parser on arbitrary model output (build with -DMMGW_FUZZ=ON). */
#include "chat_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    chat_fuzz_output(data, size);
    return 0;
}
