/*
 * startup.c - vector table, reset handler and fault handler of a tinyc firmware on Cortex-M.
 *
 * The linker script (templates/project/board/link.ld.j2) puts the table first in code memory,
 * where the core reads the initial stack pointer and the reset vector from. The reset handler
 * turns on the FPU/MVE before any C code can use it, sets up .data/.bss and calls main(); its
 * return value becomes the exit status. Every fault or unexpected exception prints one line
 * over the port's UART and stops with TINYC_CM_FAULT_EXIT, so an emulator never hangs on a
 * crashed firmware and a real board tells you where it crashed.
 */
#include <stdint.h>

#include "tinyc_cm.h"
#include "tinyc_port.h"

/* Linker script symbols (addresses only; the arrays have no meaningful size). */
extern uint32_t __data_load__[];
extern uint32_t __data_start__[];
extern uint32_t __data_end__[];
extern uint32_t __bss_start__[];
extern uint32_t __bss_end__[];
extern uint32_t __stack_top__[];
extern uint32_t __stack_limit__[];

int main(void);

void Reset_Handler(void) __attribute__((noreturn));
void tinyc_cm_fault_entry(void) __attribute__((naked));
void NMI_Handler(void) __attribute__((weak, alias("tinyc_cm_fault_entry")));
void HardFault_Handler(void) __attribute__((weak, alias("tinyc_cm_fault_entry")));
void MemManage_Handler(void) __attribute__((weak, alias("tinyc_cm_fault_entry")));
void BusFault_Handler(void) __attribute__((weak, alias("tinyc_cm_fault_entry")));
void UsageFault_Handler(void) __attribute__((weak, alias("tinyc_cm_fault_entry")));
void SecureFault_Handler(void) __attribute__((weak, alias("tinyc_cm_fault_entry")));
void SVC_Handler(void) __attribute__((weak, alias("tinyc_cm_fault_entry")));
void DebugMon_Handler(void) __attribute__((weak, alias("tinyc_cm_fault_entry")));
void PendSV_Handler(void) __attribute__((weak, alias("tinyc_cm_fault_entry")));
void SysTick_Handler(void) __attribute__((weak, alias("tinyc_cm_fault_entry")));

typedef void (*tinyc_cm_vector_t)(void);

/* The 16 system vectors (interrupts stay disabled, so no IRQ vectors are needed). */
typedef struct {
    uint32_t *initial_sp;
    tinyc_cm_vector_t handlers[15];
} tinyc_cm_vector_table_t;

__attribute__((section(".isr_vector"), used))
const tinyc_cm_vector_table_t tinyc_cm_vector_table = {
    __stack_top__,
    {
        Reset_Handler,
        NMI_Handler,
        HardFault_Handler,
        MemManage_Handler,
        BusFault_Handler,
        UsageFault_Handler,
        SecureFault_Handler,
        0,
        0,
        0,
        SVC_Handler,
        DebugMon_Handler,
        0,
        PendSV_Handler,
        SysTick_Handler,
    },
};

/* Its own function, so that no FPU/MVE instruction the compiler might schedule early can run
 * before CPACR grants access (that would be a UsageFault at reset). */
static void __attribute__((noinline)) enable_fpu(void)
{
#if defined(TINYC_HAS_FPU) || defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    TINYC_SCB_CPACR |= 0xFu << 20; /* CP10 + CP11 full access: FPU and MVE */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
}

static void __attribute__((noinline)) init_memory(void)
{
    uint32_t *dst = __data_start__;
    const uint32_t *src = __data_load__;
    while (dst < __data_end__) {
        *dst++ = *src++;
    }
    for (dst = __bss_start__; dst < __bss_end__; ++dst) {
        *dst = 0u;
    }
}

void Reset_Handler(void)
{
    enable_fpu();
#if defined(TINYC_CM_HAS_MSPLIM)
    /* ARMv8-M: a stack overflow past the reserved region faults instead of corrupting .bss */
    __asm__ volatile("msr msplim, %0" : : "r"(__stack_limit__));
#endif
    init_memory();
    tinyc_port_exit(main());
    for (;;) {
    }
}

/* Finds the stacked exception frame (MSP or PSP, from EXC_RETURN bit 2) and hands it to the C
 * reporter. Thumb-1 only, so it also assembles for ARMv6-M (Cortex-M0+). */
void tinyc_cm_fault_entry(void)
{
    __asm__ volatile(
        "movs r0, #4\n\t"
        "mov r1, lr\n\t"
        "tst r0, r1\n\t"
        "beq 1f\n\t"
        "mrs r0, psp\n\t"
        "b 2f\n"
        "1:\n\t"
        "mrs r0, msp\n"
        "2:\n\t"
        "ldr r2, =tinyc_cm_fault_report\n\t"
        "bx r2\n\t"
        ".ltorg\n");
}

void tinyc_cm_puts(const char *text)
{
    uint32_t n = 0;
    while (text[n] != '\0') {
        ++n;
    }
    tinyc_port_write((const uint8_t *)text, n);
}

void tinyc_cm_puthex(uint32_t value)
{
    static const char digits[] = "0123456789abcdef";
    uint8_t buf[10];
    int i;
    buf[0] = '0';
    buf[1] = 'x';
    for (i = 0; i < 8; ++i) {
        buf[2 + i] = (uint8_t)digits[(value >> (28 - 4 * i)) & 0xFu];
    }
    tinyc_port_write(buf, sizeof buf);
}

void tinyc_cm_fault_report(const uint32_t *frame, uint32_t exc_return)
{
    uint32_t ipsr;
    __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
    tinyc_cm_puts("\r\ntinyc: fault: exception ");
    tinyc_cm_puthex(ipsr & 0x1FFu);
    tinyc_cm_puts(" pc=");
    tinyc_cm_puthex(frame[6]);
    tinyc_cm_puts(" lr=");
    tinyc_cm_puthex(frame[5]);
    tinyc_cm_puts(" exc_return=");
    tinyc_cm_puthex(exc_return);
#if defined(TINYC_CM_MAINLINE)
    tinyc_cm_puts(" cfsr=");
    tinyc_cm_puthex(TINYC_SCB_CFSR);
    tinyc_cm_puts(" hfsr=");
    tinyc_cm_puthex(TINYC_SCB_HFSR);
    tinyc_cm_puts(" bfar=");
    tinyc_cm_puthex(TINYC_SCB_BFAR);
#endif
    tinyc_cm_puts("\r\n");
    tinyc_port_exit(TINYC_CM_FAULT_EXIT);
    for (;;) {
    }
}
