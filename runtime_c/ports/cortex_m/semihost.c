/*
 * semihost.c - leave the emulator (or a debug session) with an exit status.
 *
 * Arm semihosting: BKPT 0xAB with the operation in r0 and its argument in r1. SYS_EXIT (0x18)
 * on 32-bit Arm can only say "success" or "failure"; SYS_EXIT_EXTENDED (0x20) takes a block
 * {reason, subcode} and passes the subcode through as the exit status, so a test sees exactly
 * the code the firmware chose. Only link this where a semihosting host exists (QEMU with
 * -semihosting-config enable=on, or a debugger): on a bare board BKPT is a fault.
 */
#include <stdint.h>

#include "tinyc_cm.h"

#define TINYC_SYS_EXIT_EXTENDED 0x20u
#define TINYC_ADP_STOPPED_APPLICATION_EXIT 0x20026u

void tinyc_cm_semihost_exit(int code)
{
    static uint32_t block[2];
    block[0] = TINYC_ADP_STOPPED_APPLICATION_EXIT;
    block[1] = (uint32_t)code;
    {
        register uint32_t r0 __asm__("r0") = TINYC_SYS_EXIT_EXTENDED;
        register uint32_t *r1 __asm__("r1") = block;
        __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    }
    for (;;) {
    }
}
