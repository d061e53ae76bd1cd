/* Which instruction set the CPU kernels run with. The hot loops are compiled three times (AVX-512, AVX2+FMA,
 * baseline x86-64) and the best one the CPU supports is picked at run time; MMGW_CPU_ISA=avx2|base (or
 * kn_isa_limit) caps it, so the AVX2 and baseline paths can be tested and measured on any machine. */
#ifndef KN_ISA_H
#define KN_ISA_H

#include <stdint.h>

enum kn_isa {
    KN_ISA_BASE = 0,   /* baseline x86-64 (SSE2) or any other architecture */
    KN_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    KN_ISA_AVX512 = 2, /* AVX-512 F/VL/DQ/BW + FMA + F16C */
};

/** The level the kernels use now. */
int32_t kn_isa_get(void);

/** Cap the level at `max` (never above what the CPU supports); returns the level now in use. Not thread-safe:
 * call it before the kernels run. */
int32_t kn_isa_limit(int32_t max);

/** "avx512", "avx2" or "base". */
const char *kn_isa_name(int32_t isa);

#endif
