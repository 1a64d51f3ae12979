/* examples/cabi_la1.c declaring another abi_version, as a library built
 * against an older (or newer) header does: ABI_VERSION = 1 (ABI 1.0 in the
 * encoding before 1.2), 2 (1.1), 0x10000 (1.0 in today's encoding), 0x10003
 * (1.3) and 0x10004 (1.4) must keep working; 0x10005 (1.5, newer than this
 * harness) must be refused. STRAY_BIT sets feature bit 10 (HLA_FEAT_BACKWARD since 1.3) without
 * exporting hla_impl_run_backward: ignored at 1.2 (it meant nothing then),
 * refused with a message at 1.3. */
#include "hla_impl.h"
#undef HLA_IMPL_ABI_VERSION
#define HLA_IMPL_ABI_VERSION ABI_VERSION
#ifdef STRAY_BIT
#undef HLA_FEAT_DEN
#define HLA_FEAT_DEN ((1u << 9) | (1u << 10))
#endif
#include "cabi_la1.c"
