/* tinyc runtime core: see tinyc_rt.h. */
#include "tinyc_rt.h"

const char *tinyc_status_str(tinyc_status_t status)
{
    switch (status) {
    case TINYC_OK: return "ok";
    case TINYC_ERR_NULL_ARGUMENT: return "null argument";
    case TINYC_ERR_BAD_LAYER: return "bad layer index";
    case TINYC_ERR_ARENA_MISALIGNED: return "arena misaligned";
    case TINYC_ERR_ARENA_TOO_SMALL: return "arena too small";
    case TINYC_ERR_NOT_INITIALISED: return "context not initialised";
    default: return "unknown status";
    }
}

void tinyc_copy(void *dst, const void *src, size_t n)
{
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    if (d == s) {
        return;
    }
    while (n--) {
        *d++ = *s++;
    }
}
