/*
 * Stand-in for Nordic's nrf.h (nRF MDK), only so that tests can compile
 * runtime_c/ports/examples/nrf_uarte_port.c without the MDK. It declares just the registers and
 * constants that example uses, with the names of the real MDK; the register structs keep only
 * the fields used. Not for real firmware.
 */
#ifndef TINYC_STUB_NRF_H
#define TINYC_STUB_NRF_H

#include <stdint.h>

typedef struct {
    volatile uint32_t RTS;
    volatile uint32_t TXD;
    volatile uint32_t CTS;
    volatile uint32_t RXD;
} UARTE_PSEL_Type;

typedef struct {
    volatile uint32_t PTR;
    volatile uint32_t MAXCNT;
    volatile const uint32_t AMOUNT;
} UARTE_RXD_Type;

typedef struct {
    volatile uint32_t PTR;
    volatile uint32_t MAXCNT;
    volatile const uint32_t AMOUNT;
} UARTE_TXD_Type;

typedef struct {
    volatile uint32_t TASKS_STARTRX;
    volatile uint32_t TASKS_STOPRX;
    volatile uint32_t TASKS_STARTTX;
    volatile uint32_t TASKS_STOPTX;
    volatile uint32_t EVENTS_ENDRX;
    volatile uint32_t EVENTS_ENDTX;
    volatile uint32_t SHORTS;
    volatile uint32_t ENABLE;
    UARTE_PSEL_Type PSEL;
    volatile uint32_t BAUDRATE;
    UARTE_RXD_Type RXD;
    UARTE_TXD_Type TXD;
    volatile uint32_t CONFIG;
} NRF_UARTE_Type;

typedef struct {
    volatile uint32_t OUT;
    volatile uint32_t OUTSET;
    volatile uint32_t OUTCLR;
    volatile const uint32_t IN;
    volatile uint32_t DIR;
    volatile uint32_t DIRSET;
    volatile uint32_t DIRCLR;
} NRF_GPIO_Type;

#define NRF_UARTE0 ((NRF_UARTE_Type *)0x40002000u)
#define NRF_P0 ((NRF_GPIO_Type *)0x50000000u)

#define UARTE_BAUDRATE_BAUDRATE_Baud115200 0x01D60000u
#define UARTE_ENABLE_ENABLE_Enabled 8u
#define UARTE_SHORTS_ENDRX_STARTRX_Msk (1u << 5)

/* CMSIS core_cm4.h */
typedef struct {
    volatile uint32_t DHCSR, DCRSR, DCRDR, DEMCR;
} CoreDebug_Type;

typedef struct {
    volatile uint32_t CTRL, CYCCNT;
} DWT_Type;

#define CoreDebug ((CoreDebug_Type *)0xE000EDF0u)
#define DWT ((DWT_Type *)0xE0001000u)
#define CoreDebug_DEMCR_TRCENA_Msk (1u << 24)
#define DWT_CTRL_CYCCNTENA_Msk (1u << 0)

#endif
