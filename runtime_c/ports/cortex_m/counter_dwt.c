/*
 * counter_dwt.c - a 64-bit cycle counter from the DWT unit's 32-bit CYCCNT (ARMv7-M/ARMv8-M
 * Mainline: Cortex-M3/M4/M7/M33/M55; not the M0/M0+/M23, which use counter_systick.c).
 *
 * CYCCNT counts real core cycles. It is 32 bits wide, so the upper half is kept in software:
 * a read that finds the counter below the previous read counts one wrap. That is exact as long
 * as reads are less than 2^32 cycles apart (20 s at 216 MHz) - the harness reads it around
 * every inference. QEMU does not implement CYCCNT (it reads 0): emulated boards use SysTick.
 */
#include <stdint.h>

#include "tinyc_cm.h"

static uint32_t dwt_last;
static uint32_t dwt_high;

void tinyc_cm_counter_init(void)
{
    TINYC_DEMCR |= 1u << 24;       /* TRCENA: power the DWT */
    TINYC_DWT_LAR = 0xC5ACCE55u;   /* unlock software access (needed on the Cortex-M7) */
    TINYC_DWT_CYCCNT = 0u;
    TINYC_DWT_CTRL |= 1u;          /* CYCCNTENA */
    dwt_last = 0u;
    dwt_high = 0u;
}

uint64_t tinyc_cm_counter_read(void)
{
    uint32_t primask;
    uint32_t now;
    uint64_t result;
    __asm__ volatile("mrs %0, primask\n\tcpsid i" : "=r"(primask) : : "memory");
    now = TINYC_DWT_CYCCNT;
    if (now < dwt_last) {
        dwt_high += 1u;
    }
    dwt_last = now;
    result = ((uint64_t)dwt_high << 32) | now;
    __asm__ volatile("msr primask, %0" : : "r"(primask) : "memory");
    return result;
}
