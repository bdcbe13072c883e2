/*
 * tinyc_port.h - what a firmware needs from the board it runs on: a byte link to the host,
 * a cycle counter and a way to stop.
 *
 * The serial harness and the generated firmware main use only these six functions, so one
 * harness runs unchanged on the host (a test port), under QEMU and on real boards. tinyc ships
 * a Cortex-M implementation (runtime_c/ports/cortex_m): complete for the emulated Arm MPS2/MPS3
 * boards (CMSDK UART, SysTick, semihosting exit); on real boards every function is a weak
 * default that you override with your vendor's UART driver (see runtime_c/ports/examples).
 */
#ifndef TINYC_PORT_H
#define TINYC_PORT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bring up what the other functions need: clocks, UART, cycle counter. Call once, first. */
void     tinyc_port_init(void);

/* Send `n` bytes to the host; returns when all of them are handed to the UART (blocking). */
void     tinyc_port_write(const uint8_t *data, uint32_t n);

/* Next byte from the host (0..255), or -1 when none arrived within about `timeout_ms`
 * milliseconds (measured with the cycle counter, so only as exact as the board's clock_hz). */
int      tinyc_port_read_byte(uint32_t timeout_ms);

/* A monotonically increasing 64-bit count of processor clock ticks (SysTick extended by a
 * wrap count, or the DWT cycle counter). Under QEMU with -icount it counts instructions
 * (times a constant factor), deterministically. */
uint64_t tinyc_port_cycles(void);

/* Stop the firmware with an exit status: emulated boards leave QEMU through semihosting
 * with that status; real boards spin (or reset, if you override it). */
void     tinyc_port_exit(int code);

/* The board's name (boards/<name>.toml), reported to the host in the harness handshake. */
const char *tinyc_port_board_name(void);

#ifdef __cplusplus
}
#endif
#endif /* TINYC_PORT_H */
