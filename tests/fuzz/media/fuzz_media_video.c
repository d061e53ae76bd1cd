/* libFuzzer target: video probing, indexing, frame sampling and decoding through the whole pipeline. */
#include "fuzz_media.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_run(MMGW_MEDIA_VIDEO, data, size, size & 1);
    return 0;
}
