#ifndef TOKENGUARD_CHIREDIS_SHIM_H
#define TOKENGUARD_CHIREDIS_SHIM_H
// hiredis for the fleet replay store. Only the non-variadic redisCommandArgv is used from Swift.
#include <hiredis/hiredis.h>
#endif
