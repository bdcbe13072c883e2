/*
 * tinyc_cm.h - internals of the Cortex-M port: core registers and the pieces the port's
 * functions are assembled from (startup, UART driver, counter, semihosting).
 *
 * The board's facts arrive as -D definitions written by tinyc from boards/<name>.toml:
 *   TINYC_BOARD_NAME     "mps2-an386"        board name (string literal)
 *   TINYC_CPU_HZ         25000000u           core clock, for timeouts and the UART divisor
 *   TINYC_UART_CMSDK     1                   the Arm CMSDK APB UART (emulated MPS2/MPS3 boards);
 *                                            absent: UART I/O is yours (weak defaults)
 *   TINYC_UART_BASE      0x40004000u         UART base address
 *   TINYC_UART_BAUD      115200u             baud rate
 *   TINYC_SEMIHOSTING    1                   exit through semihosting (only under an emulator or a
 *                                            debugger: on a bare board BKPT faults)
 *   TINYC_HAS_FPU        1                   the core has an FPU (and/or MVE) to switch on at reset
 * Everything is plain C99 plus GCC's __asm__/__attribute__, so it builds warning-free with
 * -std=c99 -pedantic -Wall -Wextra.
 */
#ifndef TINYC_CM_H
#define TINYC_CM_H

#include <stdint.h>

#ifndef TINYC_BOARD_NAME
#define TINYC_BOARD_NAME "cortex-m"
#endif
#ifndef TINYC_CPU_HZ
#define TINYC_CPU_HZ 16000000u
#endif
#ifndef TINYC_UART_BAUD
#define TINYC_UART_BAUD 115200u
#endif

/* ARMv7-M / ARMv8-M Mainline: configurable fault status registers, DWT, MSPLIM (v8 only). */
#if defined(__ARM_ARCH_7M__) || defined(__ARM_ARCH_7EM__) || defined(__ARM_ARCH_8M_MAIN__) || \
    defined(__ARM_ARCH_8_1M_MAIN__)
#define TINYC_CM_MAINLINE 1
#endif
#if defined(__ARM_ARCH_8M_MAIN__) || defined(__ARM_ARCH_8_1M_MAIN__)
#define TINYC_CM_HAS_MSPLIM 1
#endif

#define TINYC_REG(addr) (*(volatile uint32_t *)(addr))

/* System control block */
#define TINYC_SCB_ICSR   TINYC_REG(0xE000ED04u)
#define TINYC_SCB_AIRCR  TINYC_REG(0xE000ED0Cu)
#define TINYC_SCB_CFSR   TINYC_REG(0xE000ED28u)
#define TINYC_SCB_HFSR   TINYC_REG(0xE000ED2Cu)
#define TINYC_SCB_MMFAR  TINYC_REG(0xE000ED34u)
#define TINYC_SCB_BFAR   TINYC_REG(0xE000ED38u)
#define TINYC_SCB_CPACR  TINYC_REG(0xE000ED88u)
#define TINYC_ICSR_PENDSTSET (1u << 26)

/* SysTick */
#define TINYC_SYST_CSR   TINYC_REG(0xE000E010u)
#define TINYC_SYST_RVR   TINYC_REG(0xE000E014u)
#define TINYC_SYST_CVR   TINYC_REG(0xE000E018u)

/* Debug exception and monitor control; DWT cycle counter */
#define TINYC_DEMCR      TINYC_REG(0xE000EDFCu)
#define TINYC_DWT_CTRL   TINYC_REG(0xE0001000u)
#define TINYC_DWT_CYCCNT TINYC_REG(0xE0001004u)
#define TINYC_DWT_LAR    TINYC_REG(0xE0001FB0u)

/* Exit status of a firmware stopped by a fault (HardFault, unexpected interrupt). */
#define TINYC_CM_FAULT_EXIT 70

/* Cycle counter (counter_systick.c or counter_dwt.c: one of them is linked). */
void tinyc_cm_counter_init(void);
uint64_t tinyc_cm_counter_read(void);

/* CMSDK UART (uart_cmsdk.c, only on boards with TINYC_UART_CMSDK). */
void tinyc_cm_uart_init(void);
void tinyc_cm_uart_putc(uint8_t byte);
int tinyc_cm_uart_getc(void); /* -1 when nothing is waiting */

/* Semihosting (semihost.c): leave the emulator/debug session with `code`. */
void tinyc_cm_semihost_exit(int code) __attribute__((noreturn));

/* Fault reporting (startup.c): write a line about the fault, then stop with TINYC_CM_FAULT_EXIT. */
void tinyc_cm_fault_report(const uint32_t *frame, uint32_t exc_return) __attribute__((noreturn));

/* Blocking write of a NUL-terminated string / a 32-bit value in hex, through the port. */
void tinyc_cm_puts(const char *text);
void tinyc_cm_puthex(uint32_t value);

#endif /* TINYC_CM_H */
