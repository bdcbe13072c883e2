/*
 * uart_cmsdk.c - the Arm CMSDK APB UART of the MPS2/MPS3 FPGA boards (and their QEMU models).
 *
 * Registers: DATA +0x00, STATE +0x04 (bit 0 TX buffer full, bit 1 RX buffer full),
 * CTRL +0x08 (bit 0 TX enable, bit 1 RX enable), BAUDDIV +0x10 (clock / baud, at least 16).
 * Polled: the firmware never enables an interrupt, so nothing can preempt an inference.
 */
#include <stdint.h>

#include "tinyc_cm.h"

#ifndef TINYC_UART_BASE
#error "TINYC_UART_BASE must be defined (the board's [uart] base)"
#endif

#define TINYC_UART_DATA    TINYC_REG(TINYC_UART_BASE + 0x00u)
#define TINYC_UART_STATE   TINYC_REG(TINYC_UART_BASE + 0x04u)
#define TINYC_UART_CTRL    TINYC_REG(TINYC_UART_BASE + 0x08u)
#define TINYC_UART_BAUDDIV TINYC_REG(TINYC_UART_BASE + 0x10u)
#define TINYC_UART_TX_FULL 1u
#define TINYC_UART_RX_FULL 2u

void tinyc_cm_uart_init(void)
{
    uint32_t div = (uint32_t)(TINYC_CPU_HZ) / (uint32_t)(TINYC_UART_BAUD);
    TINYC_UART_BAUDDIV = div < 16u ? 16u : div;
    TINYC_UART_CTRL = 3u; /* TX + RX enabled, no interrupts */
}

void tinyc_cm_uart_putc(uint8_t byte)
{
    while (TINYC_UART_STATE & TINYC_UART_TX_FULL) {
    }
    TINYC_UART_DATA = byte;
}

int tinyc_cm_uart_getc(void)
{
    if (TINYC_UART_STATE & TINYC_UART_RX_FULL) {
        return (int)(TINYC_UART_DATA & 0xFFu);
    }
    return -1;
}
