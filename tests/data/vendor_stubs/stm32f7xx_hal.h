/*
 * Stand-in for ST's stm32f7xx_hal.h, only so that tests can compile
 * runtime_c/ports/examples/stm32_hal_port.c without the STM32Cube package. It declares just the
 * types, constants and functions that example uses, with the names and signatures of the real
 * HAL and CMSIS; register layouts are reduced to the fields used. Not for real firmware.
 */
#ifndef TINYC_STUB_STM32F7XX_HAL_H
#define TINYC_STUB_STM32F7XX_HAL_H

#include <stdint.h>

typedef enum { HAL_OK = 0x00u, HAL_ERROR = 0x01u, HAL_BUSY = 0x02u, HAL_TIMEOUT = 0x03u } HAL_StatusTypeDef;

#define HAL_MAX_DELAY 0xFFFFFFFFu

typedef struct {
    volatile uint32_t CR1, CR2, CR3, BRR, GTPR, RTOR, RQR, ISR, ICR, RDR, TDR;
} USART_TypeDef;

#define USART3 ((USART_TypeDef *)0x40004800u)

typedef struct {
    uint32_t BaudRate;
    uint32_t WordLength;
    uint32_t StopBits;
    uint32_t Parity;
    uint32_t Mode;
    uint32_t HwFlowCtl;
    uint32_t OverSampling;
    uint32_t OneBitSampling;
} UART_InitTypeDef;

typedef struct {
    USART_TypeDef *Instance;
    UART_InitTypeDef Init;
} UART_HandleTypeDef;

#define UART_WORDLENGTH_8B 0x00000000u
#define UART_STOPBITS_1 0x00000000u
#define UART_PARITY_NONE 0x00000000u
#define UART_MODE_TX_RX 0x0000000Cu
#define UART_HWCONTROL_NONE 0x00000000u
#define UART_OVERSAMPLING_16 0x00000000u

HAL_StatusTypeDef HAL_Init(void);
void HAL_IncTick(void);
HAL_StatusTypeDef HAL_UART_Init(UART_HandleTypeDef *huart);
HAL_StatusTypeDef HAL_UART_Transmit(UART_HandleTypeDef *huart, uint8_t *pData, uint16_t Size, uint32_t Timeout);
HAL_StatusTypeDef HAL_UART_Receive(UART_HandleTypeDef *huart, uint8_t *pData, uint16_t Size, uint32_t Timeout);

/* CMSIS core_cm7.h */
typedef struct {
    volatile uint32_t DHCSR, DCRSR, DCRDR, DEMCR;
} CoreDebug_Type;

typedef struct {
    volatile uint32_t CTRL, CYCCNT, CPICNT, EXCCNT, SLEEPCNT, LSUCNT, FOLDCNT;
    const volatile uint32_t PCSR;
    uint32_t RESERVED[1000];
    volatile uint32_t LAR;
} DWT_Type;

#define CoreDebug ((CoreDebug_Type *)0xE000EDF0u)
#define DWT ((DWT_Type *)0xE0001000u)
#define CoreDebug_DEMCR_TRCENA_Msk (1u << 24)
#define DWT_CTRL_CYCCNTENA_Msk (1u << 0)

#endif
