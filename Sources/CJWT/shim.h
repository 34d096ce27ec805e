#ifndef TOKENGUARD_CJWT_SHIM_H
#define TOKENGUARD_CJWT_SHIM_H
// libjwt is only a reference verifier for tests and the benchmark; production code never links it.
#include <jwt.h>
#endif
