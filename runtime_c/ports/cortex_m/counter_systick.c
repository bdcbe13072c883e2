/*
 * counter_systick.c - a 64-bit tick counter from the 24-bit SysTick timer.
 *
 * SysTick counts down from 0xFFFFFF at the core clock; its interrupt adds one to a wrap count,
 * so ticks = wraps * 2^24 + (0xFFFFFF - current). Every Cortex-M has SysTick (the M0+ has no
 * DWT cycle counter) and QEMU models it: with -icount shift=S,sleep=off it advances with the
 * executed instructions, which makes counts deterministic (see boards/README.md).
 */
#include <stdint.h>

#include "tinyc_cm.h"

#define TINYC_SYSTICK_RELOAD 0xFFFFFFu

static volatile uint32_t systick_wraps;

void SysTick_Handler(void)
{
    systick_wraps = systick_wraps + 1u;
}

void tinyc_cm_counter_init(void)
{
    TINYC_SYST_CSR = 0u;
    systick_wraps = 0u;
    TINYC_SYST_RVR = TINYC_SYSTICK_RELOAD;
    TINYC_SYST_CVR = 0u;  /* any write clears it; it reloads on the next tick */
    TINYC_SYST_CSR = 7u;  /* processor clock, wrap interrupt, enable */
}

/* Consistent across a wrap: with interrupts masked the wrap count cannot change under us; if
 * the timer wrapped but its interrupt is still pending, the value is read again (now surely
 * after the reload) and the pending wrap is counted here. */
uint64_t tinyc_cm_counter_read(void)
{
    uint32_t primask;
    uint32_t wraps;
    uint32_t value;
    __asm__ volatile("mrs %0, primask\n\tcpsid i" : "=r"(primask) : : "memory");
    wraps = systick_wraps;
    value = TINYC_SYST_CVR;
    if (TINYC_SCB_ICSR & TINYC_ICSR_PENDSTSET) {
        value = TINYC_SYST_CVR;
        wraps += 1u;
    }
    __asm__ volatile("msr primask, %0" : : "r"(primask) : "memory");
    return ((uint64_t)wraps << 24) + (uint64_t)(TINYC_SYSTICK_RELOAD - (value & TINYC_SYSTICK_RELOAD));
}
