/*
 * stm32_hal_port.c - example tinyc port for an STM32 with ST's HAL (STM32Cube): the UART through
 * HAL_UART_Transmit/HAL_UART_Receive, the cycle counter from the DWT.
 *
 * It defines all six functions of tinyc_port.h, so it works both ways:
 *  - in a tinyc firmware project for an STM32 board (e.g. --board nucleo-f746zg): add this file
 *    (and your HAL sources) to FIRMWARE_SOURCES in CMakeLists.txt; these definitions replace the
 *    port's weak defaults;
 *  - in your own STM32Cube project with the model compiled as a library.
 * What it expects from the STM32Cube project (CubeMX generates all of it): the HAL and its
 * configuration, SystemClock_Config() (copied out of CubeMX's main.c, made non-static),
 * HAL_UART_MspInit() (UART pins and clocks) and a SysTick_Handler that calls HAL_IncTick() - the
 * HAL's timeouts count SysTick milliseconds.
 * Choose the family header and the UART with -D: the defaults are for the NUCLEO-F746ZG, whose
 * ST-LINK virtual COM port is USART3. (NUCLEO-L4R5ZI: "stm32l4xx_hal.h" and LPUART1, after
 * HAL_PWREx_EnableVddIO2() - its pins are on port G.)
 */
#ifndef TINYC_STM32_HAL_HEADER
#define TINYC_STM32_HAL_HEADER "stm32f7xx_hal.h"
#endif
#ifndef TINYC_STM32_UART
#define TINYC_STM32_UART USART3
#endif
#ifndef TINYC_STM32_BAUD
#define TINYC_STM32_BAUD 115200u
#endif
#ifndef TINYC_BOARD_NAME
#define TINYC_BOARD_NAME "stm32"
#endif

#include <stdint.h>

#include TINYC_STM32_HAL_HEADER
#include "tinyc_port.h"

void SystemClock_Config(void);

static UART_HandleTypeDef tinyc_uart;
static uint32_t cyccnt_last;
static uint32_t cyccnt_high;

void tinyc_port_init(void)
{
    HAL_Init();
    SystemClock_Config();
    tinyc_uart.Instance = TINYC_STM32_UART;
    tinyc_uart.Init.BaudRate = TINYC_STM32_BAUD;
    tinyc_uart.Init.WordLength = UART_WORDLENGTH_8B;
    tinyc_uart.Init.StopBits = UART_STOPBITS_1;
    tinyc_uart.Init.Parity = UART_PARITY_NONE;
    tinyc_uart.Init.Mode = UART_MODE_TX_RX;
    tinyc_uart.Init.HwFlowCtl = UART_HWCONTROL_NONE;
    tinyc_uart.Init.OverSampling = UART_OVERSAMPLING_16;
    if (HAL_UART_Init(&tinyc_uart) != HAL_OK) {
        tinyc_port_exit(1);
    }
    /* DWT cycle counter: trace enable, unlock (Cortex-M7), reset, start */
    CoreDebug->DEMCR |= CoreDebug_DEMCR_TRCENA_Msk;
    DWT->LAR = 0xC5ACCE55u;
    DWT->CYCCNT = 0u;
    DWT->CTRL |= DWT_CTRL_CYCCNTENA_Msk;
    cyccnt_last = 0u;
    cyccnt_high = 0u;
}

void tinyc_port_write(const uint8_t *data, uint32_t n)
{
    while (n > 0u) {
        /* the HAL takes at most 65535 bytes per call */
        uint16_t chunk = (uint16_t)(n > 0xFFFFu ? 0xFFFFu : n);
        (void)HAL_UART_Transmit(&tinyc_uart, (uint8_t *)data, chunk, HAL_MAX_DELAY);
        data += chunk;
        n -= chunk;
    }
}

int tinyc_port_read_byte(uint32_t timeout_ms)
{
    uint8_t byte = 0;
    if (HAL_UART_Receive(&tinyc_uart, &byte, 1u, timeout_ms) == HAL_OK) {
        return (int)byte;
    }
    return -1;
}

/* 64 bits from the 32-bit CYCCNT: a read below the previous one counts a wrap (reads must be
 * less than 2^32 cycles apart: about 20 s at 216 MHz). */
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
