/*
 * nrf_uarte_port.c - example tinyc port for a Nordic nRF52 (nRF52840 DK): UARTE0 driven through
 * its registers as the nRF MDK (nrf.h) declares them, the cycle counter from the DWT.
 *
 * It defines all six functions of tinyc_port.h: add it to FIRMWARE_SOURCES of a tinyc firmware
 * project for --board nrf52840dk (plus the MDK's include folders and CMSIS), or use it in your
 * own nRF project with the model compiled as a library. Pins default to the DK's virtual COM
 * port (J-Link OB): P0.06 TX, P0.08 RX.
 * UARTE moves data with EasyDMA, which reads RAM only: outgoing bytes are copied through a RAM
 * buffer. Reception is armed for one byte and re-armed by hardware (ENDRX -> STARTRX shortcut),
 * so the firmware must fetch each byte within one character time (87 us at 115200 baud) - the
 * harness does, as it reads a frame byte by byte while the host waits for its reply.
 */
#ifndef TINYC_NRF_TX_PIN
#define TINYC_NRF_TX_PIN 6u
#endif
#ifndef TINYC_NRF_RX_PIN
#define TINYC_NRF_RX_PIN 8u
#endif
#ifndef TINYC_NRF_CPU_HZ
#define TINYC_NRF_CPU_HZ 64000000u
#endif
#ifndef TINYC_BOARD_NAME
#define TINYC_BOARD_NAME "nrf52840dk"
#endif

#include <stdint.h>

#include "nrf.h"
#include "tinyc_port.h"

static uint8_t tx_buf[64];
static volatile uint8_t rx_byte;
static uint32_t cyccnt_last;
static uint32_t cyccnt_high;

void tinyc_port_init(void)
{
    NRF_P0->OUTSET = 1u << TINYC_NRF_TX_PIN; /* TX idles high */
    NRF_P0->DIRSET = 1u << TINYC_NRF_TX_PIN;
    NRF_UARTE0->PSEL.TXD = TINYC_NRF_TX_PIN;
    NRF_UARTE0->PSEL.RXD = TINYC_NRF_RX_PIN;
    NRF_UARTE0->BAUDRATE = UARTE_BAUDRATE_BAUDRATE_Baud115200;
    NRF_UARTE0->CONFIG = 0u; /* 8N1, no flow control */
    NRF_UARTE0->ENABLE = UARTE_ENABLE_ENABLE_Enabled;
    NRF_UARTE0->RXD.PTR = (uint32_t)&rx_byte;
    NRF_UARTE0->RXD.MAXCNT = 1u;
    NRF_UARTE0->SHORTS = UARTE_SHORTS_ENDRX_STARTRX_Msk;
    NRF_UARTE0->EVENTS_ENDRX = 0u;
    NRF_UARTE0->TASKS_STARTRX = 1u;

    CoreDebug->DEMCR |= CoreDebug_DEMCR_TRCENA_Msk;
    DWT->CYCCNT = 0u;
    DWT->CTRL |= DWT_CTRL_CYCCNTENA_Msk;
    cyccnt_last = 0u;
    cyccnt_high = 0u;
}

void tinyc_port_write(const uint8_t *data, uint32_t n)
{
    while (n > 0u) {
        uint32_t chunk = n > sizeof tx_buf ? (uint32_t)sizeof tx_buf : n;
        uint32_t i;
        for (i = 0; i < chunk; ++i) {
            tx_buf[i] = data[i];
        }
        NRF_UARTE0->TXD.PTR = (uint32_t)tx_buf;
        NRF_UARTE0->TXD.MAXCNT = chunk;
        NRF_UARTE0->EVENTS_ENDTX = 0u;
        NRF_UARTE0->TASKS_STARTTX = 1u;
        while (NRF_UARTE0->EVENTS_ENDTX == 0u) {
        }
        data += chunk;
        n -= chunk;
    }
}

int tinyc_port_read_byte(uint32_t timeout_ms)
{
    const uint64_t limit = (uint64_t)timeout_ms * (TINYC_NRF_CPU_HZ / 1000u);
    const uint64_t start = tinyc_port_cycles();
    while (NRF_UARTE0->EVENTS_ENDRX == 0u) {
        if (tinyc_port_cycles() - start >= limit) {
            return -1;
        }
    }
    NRF_UARTE0->EVENTS_ENDRX = 0u;
    return (int)rx_byte;
}

uint64_t tinyc_port_cycles(void)
{
    uint32_t now = DWT->CYCCNT;
    if (now < cyccnt_last) {
        ++cyccnt_high;
    }
    cyccnt_last = now;
    return ((uint64_t)cyccnt_high << 32) | now;
}

void tinyc_port_exit(int code)
{
    (void)code;
    for (;;) {
    }
}

const char *tinyc_port_board_name(void)
{
    return TINYC_BOARD_NAME;
}
