/* examples/cabi_la1.c declaring another abi_version, as a library built
 * against an older (or newer) header does: ABI_VERSION = 1 (ABI 1.0 in the
 * encoding before 1.2), 2 (1.1), 0x10000 (1.0 in today's encoding) must keep
 * working; 0x10003 (1.3, newer than this harness) must be refused. */
#include "hla_impl.h"
#undef HLA_IMPL_ABI_VERSION
#define HLA_IMPL_ABI_VERSION ABI_VERSION
#include "cabi_la1.c"
