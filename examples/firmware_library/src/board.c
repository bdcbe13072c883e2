/*
 * board.c - MPS2+ AN386 board services for the example: CMSDK APB UART0 output and a
 * semihosting exit, so that QEMU ends with main()'s return value as its exit status.
 */
#include "board.h"

#define UART0_BASE 0x40004000u
#define UART_DATA    (*(volatile uint32_t *)(UART0_BASE + 0x00u))
#define UART_STATE   (*(volatile uint32_t *)(UART0_BASE + 0x04u))
#define UART_CTRL    (*(volatile uint32_t *)(UART0_BASE + 0x08u))
#define UART_BAUDDIV (*(volatile uint32_t *)(UART0_BASE + 0x10u))
#define UART_STATE_TX_FULL 1u

void board_init(void)
{
    UART_BAUDDIV = 16u;
    UART_CTRL = 1u; /* transmitter on */
}

void board_putc(char c)
{
    while (UART_STATE & UART_STATE_TX_FULL) {
    }
    UART_DATA = (uint32_t)(unsigned char)c;
}

void board_puts(const char *s)
{
    while (*s) {
        board_putc(*s++);
    }
}

void board_put_uint(uint32_t v)
{
    char buf[10];
    int n = 0;
    do {
        buf[n++] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    while (n) {
        board_putc(buf[--n]);
    }
}

void board_put_hex32(uint32_t v)
{
    int shift;
    for (shift = 28; shift >= 0; shift -= 4) {
        board_putc("0123456789abcdef"[(v >> shift) & 0xFu]);
    }
}

void board_exit(int code)
{
    /* SYS_EXIT_EXTENDED with ADP_Stopped_ApplicationExit: QEMU exits with `code`.
     * On a real board without a debugger attached this would be a fault: spin instead. */
    static volatile uint32_t block[2];
    block[0] = 0x20026u;
    block[1] = (uint32_t)code;
    register uint32_t r0 __asm__("r0") = 0x20u;
    register volatile uint32_t *r1 __asm__("r1") = block;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    for (;;) {
    }
}
