/*
 * port.c - tinyc_port_* (runtime_c/include/tinyc_port.h) for Cortex-M boards.
 *
 * Every function is weak: define your own with the same name in any source of the firmware
 * and the linker takes yours. Boards with the CMSDK UART (the emulated MPS2/MPS3 boards) are
 * complete as they are. On real boards ([uart] driver = "user") the UART belongs to your vendor
 * SDK: override tinyc_port_init (clocks, pins, UART; call tinyc_cm_counter_init() or start
 * your own counter), tinyc_port_write and tinyc_port_read_byte - runtime_c/ports/examples has
 * an STM32 HAL and an nRF version. Until then writes are dropped and reads time out.
 */
#include <stdint.h>

#include "tinyc_cm.h"
#include "tinyc_port.h"

#define TINYC_WEAK __attribute__((weak))

TINYC_WEAK void tinyc_port_init(void)
{
#if defined(TINYC_UART_CMSDK)
    tinyc_cm_uart_init();
#endif
    tinyc_cm_counter_init();
}

TINYC_WEAK void tinyc_port_write(const uint8_t *data, uint32_t n)
{
#if defined(TINYC_UART_CMSDK)
    uint32_t i;
    for (i = 0; i < n; ++i) {
        tinyc_cm_uart_putc(data[i]);
    }
#else
    (void)data; /* no UART driver on this board: override tinyc_port_write */
    (void)n;
#endif
}

/* Polls until a byte arrives or `timeout_ms` worth of counter ticks (at TINYC_CPU_HZ) passed.
 * The loop count bounds the wait too, so a counter that does not run cannot hang it. */
TINYC_WEAK int tinyc_port_read_byte(uint32_t timeout_ms)
{
    const uint64_t limit = (uint64_t)timeout_ms * ((uint32_t)(TINYC_CPU_HZ) / 1000u);
    const uint64_t start = tinyc_port_cycles();
    uint64_t spins = 0;
    for (;;) {
#if defined(TINYC_UART_CMSDK)
        int c = tinyc_cm_uart_getc();
        if (c >= 0) {
            return c;
        }
#endif
        if (tinyc_port_cycles() - start >= limit || ++spins >= limit) {
            return -1;
        }
    }
}

TINYC_WEAK uint64_t tinyc_port_cycles(void)
{
    return tinyc_cm_counter_read();
}

TINYC_WEAK void tinyc_port_exit(int code)
{
#if defined(TINYC_SEMIHOSTING)
    tinyc_cm_semihost_exit(code);
#else
    (void)code; /* nowhere to return to on a bare board: stay here for the debugger */
    for (;;) {
    }
#endif
}

TINYC_WEAK const char *tinyc_port_board_name(void)
{
    return TINYC_BOARD_NAME;
}
