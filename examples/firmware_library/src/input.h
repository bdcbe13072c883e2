/* input.h - written by make_input.py: digits test image 0, label 2. */
#ifndef INPUT_H
#define INPUT_H

#define INPUT_LABEL 2u

static const float model_input[64] = {
    0.0f, 0.0f, 0.4375f, 1.0f, 0.875f, 0.1875f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.5625f, 0.875f, 0.6875f, 0.9375f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0625f, 0.3125f, 0.0f, 0.9375f, 0.3125f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.3125f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f, 0.1875f, 1.0f, 0.25f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0625f, 0.75f, 0.875f, 0.0625f, 0.0f,
    0.0f, 0.0f, 0.3125f, 0.75f, 1.0f, 1.0f, 0.875f, 0.0625f,
    0.0f, 0.0f, 0.5f, 1.0f, 0.875f, 0.625f, 0.8125f, 0.1875f
};

#endif /* INPUT_H */
