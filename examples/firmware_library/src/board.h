/* board.h - the few board services the example firmware uses (UART output, stop). */
#ifndef BOARD_H
#define BOARD_H

#include <stdint.h>

void board_init(void);
void board_putc(char c);
void board_puts(const char *s);
void board_put_uint(uint32_t v);
void board_put_hex32(uint32_t v);
/* Under QEMU: ends the emulation with `code` as its exit status (semihosting). */
void board_exit(int code) __attribute__((noreturn));

#endif /* BOARD_H */
