/*
 * main.c - an existing firmware that runs a tinyc model: one inference on a fixed input
 * (input.h) and the predicted digit over the UART. The model comes from
 *   tinyc compile examples/digits/digits_cnn.onnx --board mps2-an386 --format library -o lib
 * and is linked as the static library tinyc::digits_cnn (CMake) or $(DIGITS_CNN_LIB) (make).
 */
#include <stdint.h>
#include <string.h>

#include "board.h"
#include "digits_cnn.h"
#include "input.h"

/* input.h must hold exactly one model input. */
typedef char input_matches_model[(sizeof model_input / sizeof model_input[0] == DIGITS_CNN_IN_INPUT_SIZE) ? 1 : -1];

static float logits[DIGITS_CNN_OUT_LOGITS_SIZE];

int main(void)
{
    uint32_t i;
    uint32_t best = 0;

    board_init();
    if (digits_cnn_run(model_input, logits) != 0) {
        board_puts("digits_cnn_run failed\n");
        return 1;
    }
    for (i = 1; i < DIGITS_CNN_OUT_LOGITS_SIZE; i++) {
        if (logits[i] > logits[best]) {
            best = i;
        }
    }
    board_puts("digit: ");
    board_put_uint(best);
    board_puts(" (label ");
    board_put_uint(INPUT_LABEL);
    board_puts(")\nlogits:");
    for (i = 0; i < DIGITS_CNN_OUT_LOGITS_SIZE; i++) { /* IEEE-754 bits: exact, and no printf needed */
        uint32_t bits;
        memcpy(&bits, &logits[i], sizeof bits);
        board_putc(' ');
        board_put_hex32(bits);
    }
    board_puts("\n");
    return 0;
}
