/* libFuzzer target: image decoding (JPEG, PNG, WebP, GIF, BMP, PNM, ICO, TGA, PCX, TIFF) through the whole
 * pipeline. */
#include "fuzz_media.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_run(MMGW_MEDIA_IMAGE, data, size, size & 1);
    return 0;
}
