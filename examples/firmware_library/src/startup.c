/*
 * startup.c - the example firmware's own reset code: vector table, .data/.bss set-up, FPU on,
 * then main(). tinyc's library format leaves all of this to the firmware it is dropped into.
 */
#include <stdint.h>

#include "board.h"

extern uint32_t __data_load[];
extern uint32_t __data_start[];
extern uint32_t __data_end[];
extern uint32_t __bss_start[];
extern uint32_t __bss_end[];
extern uint32_t __stack_top[];

int main(void);
void Reset_Handler(void);
static void Fault_Handler(void);

typedef void (*vector_t)(void);

/* What the core reads at reset: the initial stack pointer, then the exception handlers. */
struct vector_table {
    uint32_t *initial_sp;
    vector_t handlers[15];
};

__attribute__((section(".vectors"), used))
static const struct vector_table vectors = {
    __stack_top,
    {
        Reset_Handler,
        Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, /* NMI .. UsageFault */
        0, 0, 0, 0,
        Fault_Handler, Fault_Handler, 0, Fault_Handler, Fault_Handler,             /* SVC .. SysTick */
    },
};

/* Separate and not inlined: no FPU instruction may run before CPACR grants access. */
static void __attribute__((noinline)) enable_fpu(void)
{
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20; /* CP10, CP11: full access */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
}

void Reset_Handler(void)
{
    uint32_t *src = __data_load;
    uint32_t *dst = __data_start;
    while (dst < __data_end) {
        *dst++ = *src++;
    }
    for (dst = __bss_start; dst < __bss_end; dst++) {
        *dst = 0u;
    }
    enable_fpu();
    board_exit(main());
}

static void Fault_Handler(void)
{
    board_puts("fault\n");
    board_exit(99);
}
