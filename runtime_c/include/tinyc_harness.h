/*
 * tinyc_harness.h - the firmware side of the tinyc serial test harness.
 *
 * A firmware built with this harness waits for requests from the host (tinyc.device.client)
 * over the byte link of tinyc_port.h, and answers them: write the model's inputs, run it N
 * times and report the cycle counter, read the outputs, time every layer. The wire format is
 * specified in docs/protocol.md; in short: COBS-framed packets delimited by 0x00, each ending
 * in a CRC-32, with a sequence number so that a retried request is answered from a cache.
 *
 * Needs no heap, no printf and no libc beyond <stdint.h>; static RAM is about three frames
 * (3 x ~270 bytes with the default payload limit).
 */
#ifndef TINYC_HARNESS_H
#define TINYC_HARNESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Protocol version spoken by this firmware; HELLO fails with a clear error on a mismatch. */
#define TINYC_HARNESS_PROTOCOL_VERSION 1u

/* Largest payload of one packet (request body, or reply status + body), in bytes. The host
 * learns it from HELLO and sizes its data chunks to it. Override with -D for very small RAM. */
#ifndef TINYC_HARNESS_MAX_PAYLOAD
#define TINYC_HARNESS_MAX_PAYLOAD 256u
#endif

/* A partly received frame is dropped (with a TRUNCATED error reply) after this long without
 * a byte: recovers from a lost delimiter without waiting for the next frame. */
#ifndef TINYC_HARNESS_FRAME_TIMEOUT_MS
#define TINYC_HARNESS_FRAME_TIMEOUT_MS 1000u
#endif

/* One model input or output tensor: its bytes, as the wire sees them (raw little-endian).
 * `data` points where the harness main keeps the tensor: into the model's arena (the context
 * API's <m>_input / <m>_output: zero copy), into the weights for a constant output, or at a
 * staging array for an input whose arena bytes a run reuses. The harness only ever touches it
 * byte by byte, and only reads outputs. */
typedef struct {
    uint8_t *data;
    uint32_t bytes;
} tinyc_harness_io_t;

/* What the harness serves: rendered by templates/project/harness_main.c.j2. */
typedef struct {
    const char *model_name;      /* graph name */
    const char *model_hash;      /* hex sha256 prefix (16 chars) of the generated sources */
    const char *tinyc_version;
    const char *counter_kind;    /* what tinyc_port_cycles() counts: "systick", "dwt", "ns"... */
    uint32_t arena_bytes;
    uint32_t num_layers;
    uint32_t num_inputs;
    uint32_t num_outputs;
    const tinyc_harness_io_t *inputs;   /* wire order: all inputs concatenated in this order */
    const tinyc_harness_io_t *outputs;  /* all outputs concatenated in this order */
    uint32_t *profile_ticks;     /* num_layers + 2 entries: set_inputs, each layer, get_outputs */
    int  (*run)(void);           /* one inference from the input tensors into the outputs; 0 = ok */
    void (*set_inputs)(void);
    int  (*run_layer)(int32_t index);
    void (*get_outputs)(void);
    const char *(*layer_name)(int32_t index);
} tinyc_harness_model_t;

/* Serve protocol requests forever; returns only after an EXIT command, with its code. */
int tinyc_harness_serve(const tinyc_harness_model_t *model);

/* The framing primitives, public so that tests can check them against the host's encoder. */

/* CRC-32 (IEEE 802.3, reflected, as zlib.crc32) of `n` bytes. */
uint32_t tinyc_harness_crc32(const uint8_t *data, uint32_t n);

/* COBS-encode `n` bytes of `src` into `dst` (room for n + n/254 + 1 bytes); returns the encoded
 * length. The output contains no 0x00 byte. */
uint32_t tinyc_harness_cobs_encode(const uint8_t *src, uint32_t n, uint8_t *dst);

/* COBS-decode `n` bytes in place; returns the decoded length, or -1 when the input is not
 * valid COBS (a 0x00 byte, or a block running past the end). */
int32_t tinyc_harness_cobs_decode(uint8_t *buf, uint32_t n);

#ifdef __cplusplus
}
#endif
#endif /* TINYC_HARNESS_H */
