/*
 * tinyc_harness.c - firmware side of the serial test harness (see tinyc_harness.h and
 * docs/protocol.md for the wire format).
 *
 * Every field is (de)serialised byte by byte in little-endian order, never by casting a struct,
 * so the code is the same on any CPU and compiler. No heap, no printf, no libc calls: the
 * only outside functions are the six of tinyc_port.h and the model's own.
 */
#include "tinyc_harness.h"
#include "tinyc_port.h"

/* ---- wire constants (docs/protocol.md keeps the same names) ---- */
enum {
    CMD_HELLO = 0x01,
    CMD_WRITE_INPUT = 0x02,
    CMD_RUN = 0x03,
    CMD_READ_OUTPUT = 0x04,
    CMD_PROFILE = 0x05,
    CMD_PROFILE_READ = 0x06,
    CMD_LAYER_NAME = 0x07,
    CMD_RESET = 0x08,
    CMD_EXIT = 0x09,
    CMD_RUN_LAYER = 0x0A,
    CMD_OUTPUT_CRC = 0x0B,
    REPLY_FLAG = 0x80,
    FRAME_ERROR_CMD = 0xFF
};

enum {
    ST_OK = 0,
    ST_BAD_CRC = 1,
    ST_OVERSIZE = 2,
    ST_TRUNCATED = 3,
    ST_BAD_COBS = 4,
    ST_UNKNOWN_CMD = 5,
    ST_BAD_LENGTH = 6,
    ST_BAD_RANGE = 7,
    ST_BAD_ARG = 8,
    ST_MODEL_ERROR = 9,
    ST_VERSION = 10,
    ST_UNSUPPORTED = 11
};

#define HDR_BYTES 2u                       /* cmd, seq */
#define CRC_BYTES 4u
#define MAX_PAYLOAD ((uint32_t)TINYC_HARNESS_MAX_PAYLOAD)
#define PACKET_MAX (HDR_BYTES + MAX_PAYLOAD + CRC_BYTES)
#define COBS_MAX(n) ((n) + (n) / 254u + 1u)
#define RX_MAX COBS_MAX(PACKET_MAX)
#define TX_MAX (RX_MAX + 2u)               /* plus a leading and a trailing 0x00 delimiter */
#define ERR_PACKET (HDR_BYTES + 1u + 4u + CRC_BYTES)
#define MAX_STRING 63u                     /* longest string field of HELLO */

/* HELLO's fixed part (25 bytes incl. status) and five empty strings must fit. */
typedef char tinyc_harness_payload_too_small[(TINYC_HARNESS_MAX_PAYLOAD >= 32u) ? 1 : -1];
/* Lengths travel as u16. */
typedef char tinyc_harness_payload_too_large[(TINYC_HARNESS_MAX_PAYLOAD <= 4096u) ? 1 : -1];

/* The whole mutable state: one frame being received, one reply being built, and the last
 * reply on the wire (kept for a retried request). */
static uint8_t rx_buf[RX_MAX];
static uint32_t rx_len;
static uint8_t rx_overflow;
static uint8_t pkt_buf[PACKET_MAX];
static uint8_t tx_buf[TX_MAX];
static uint32_t tx_len;
static uint8_t err_buf[COBS_MAX(ERR_PACKET) + 2u];
static uint8_t last_valid;
static uint8_t last_cmd;
static uint8_t last_seq;
static uint32_t last_crc;

/* ---- little-endian helpers ---- */
static void put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get16(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* ---- framing ---- */
/* CRC-32/IEEE over more than one piece: start with 0xFFFFFFFF, feed, invert at the end. */
static uint32_t crc32_update(uint32_t crc, const uint8_t *data, uint32_t n)
{
    /* Bitwise: no 1 KB table in flash; ~8 shifts per byte is far below a UART byte time. */
    uint32_t i;
    int b;
    for (i = 0; i < n; ++i) {
        crc ^= data[i];
        for (b = 0; b < 8; ++b) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    return crc;
}

uint32_t tinyc_harness_crc32(const uint8_t *data, uint32_t n)
{
    return ~crc32_update(0xFFFFFFFFu, data, n);
}

uint32_t tinyc_harness_cobs_encode(const uint8_t *src, uint32_t n, uint8_t *dst)
{
    uint32_t code_at = 0;
    uint32_t out = 1;
    uint8_t code = 1;
    uint32_t i;
    for (i = 0; i < n; ++i) {
        if (src[i] != 0) {
            dst[out++] = src[i];
            ++code;
        }
        if (src[i] == 0 || code == 0xFF) {
            dst[code_at] = code;
            code = 1;
            code_at = out;
            if (src[i] != 0 && i + 1u == n) {
                return out;  /* a full block ends the data: no empty block after it */
            }
            ++out;
        }
    }
    dst[code_at] = code;
    return out;
}

int32_t tinyc_harness_cobs_decode(uint8_t *buf, uint32_t n)
{
    uint32_t in = 0;
    uint32_t out = 0;
    while (in < n) {
        uint32_t code = buf[in++];
        uint32_t k;
        if (code == 0) {
            return -1;
        }
        for (k = 1; k < code; ++k) {
            if (in >= n || buf[in] == 0) {
                return -1;
            }
            buf[out++] = buf[in++];
        }
        if (code != 0xFF && in < n) {
            buf[out++] = 0;
        }
    }
    return (int32_t)out;
}

/* Finish the packet in pkt_buf (payload_len bytes after the header), frame it into `dst` as
 * 0x00 COBS(packet + CRC) 0x00, send it, and return the frame's length. */
static uint32_t send_packet(uint32_t payload_len, uint8_t *dst)
{
    uint32_t plen = HDR_BYTES + payload_len;
    uint32_t len;
    put32(pkt_buf + plen, tinyc_harness_crc32(pkt_buf, plen));
    dst[0] = 0;
    len = tinyc_harness_cobs_encode(pkt_buf, plen + CRC_BYTES, dst + 1) + 2u;
    dst[len - 1u] = 0;
    tinyc_port_write(dst, len);
    return len;
}

/* A frame that could not be read as a request at all: answered with cmd 0xFF, seq 0, so the
 * host resends. Uses its own buffer, keeping the cached reply for a retried request. */
static void frame_error(uint8_t status, uint32_t detail)
{
    pkt_buf[0] = FRAME_ERROR_CMD;
    pkt_buf[1] = 0;
    pkt_buf[2] = status;
    put32(pkt_buf + 3, detail);
    (void)send_packet(5u, err_buf);
}

/* ---- request handlers: read the body, write the reply body into `out`, return its status;
 * *len gets the reply body's length, *detail the error detail (for a non-zero status). ---- */
static uint32_t total_bytes(const tinyc_harness_io_t *io, uint32_t count)
{
    uint32_t k;
    uint32_t sum = 0;
    for (k = 0; k < count; ++k) {
        sum += io[k].bytes;
    }
    return sum;
}

/* Copy `n` bytes at byte `offset` of the concatenation of `io` tensors to (into_io) or from buf. */
static void io_copy(const tinyc_harness_io_t *io, uint32_t count, uint32_t offset, uint8_t *buf,
                    uint32_t n, int into_io)
{
    uint32_t k;
    for (k = 0; k < count && n > 0; ++k) {
        uint32_t take;
        uint32_t i;
        if (offset >= io[k].bytes) {
            offset -= io[k].bytes;
            continue;
        }
        take = io[k].bytes - offset;
        if (take > n) {
            take = n;
        }
        for (i = 0; i < take; ++i) {
            if (into_io) {
                io[k].data[offset + i] = buf[i];
            } else {
                buf[i] = io[k].data[offset + i];
            }
        }
        buf += take;
        n -= take;
        offset = 0;
    }
}

static uint32_t put_string(uint8_t *out, uint32_t room, const char *s)
{
    uint32_t n = 0;
    if (room == 0) {
        return 0;
    }
    room -= 1u;
    if (room > MAX_STRING) {
        room = MAX_STRING;
    }
    while (s && s[n] && n < room) {
        out[1u + n] = (uint8_t)s[n];
        ++n;
    }
    out[0] = (uint8_t)n;
    return n + 1u;
}

static uint32_t saturate32(uint64_t v)
{
    return v > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)v;
}

static uint8_t do_hello(const tinyc_harness_model_t *m, const uint8_t *body, uint32_t blen,
                        uint8_t *out, uint32_t *len, uint32_t *detail)
{
    const uint32_t room = MAX_PAYLOAD - 1u;
    uint32_t n = 24u;
    if (blen < 1u) {
        return ST_BAD_LENGTH;
    }
    if (body[0] != TINYC_HARNESS_PROTOCOL_VERSION) {
        *detail = TINYC_HARNESS_PROTOCOL_VERSION;
        return ST_VERSION;
    }
    out[0] = TINYC_HARNESS_PROTOCOL_VERSION;
    out[1] = 0;
    put16(out + 2, MAX_PAYLOAD);
    put32(out + 4, m->arena_bytes);
    put32(out + 8, m->num_layers);
    put32(out + 12, total_bytes(m->inputs, m->num_inputs));
    put32(out + 16, total_bytes(m->outputs, m->num_outputs));
    put16(out + 20, m->num_inputs);
    put16(out + 22, m->num_outputs);
    n += put_string(out + n, room - n, tinyc_port_board_name());
    n += put_string(out + n, room - n, m->model_name);
    n += put_string(out + n, room - n, m->model_hash);
    n += put_string(out + n, room - n, m->tinyc_version);
    n += put_string(out + n, room - n, m->counter_kind);
    *len = n;
    return ST_OK;
}

/* Shared by WRITE_INPUT/READ_OUTPUT: is [offset, offset + n) inside `total` bytes? */
static uint8_t check_range(uint32_t offset, uint32_t n, uint32_t total, uint32_t *detail)
{
    if (offset > total || n > total - offset) {
        *detail = total;
        return ST_BAD_RANGE;
    }
    return ST_OK;
}

static uint8_t do_write_input(const tinyc_harness_model_t *m, uint8_t *body, uint32_t blen,
                              uint32_t *detail)
{
    uint32_t offset;
    uint8_t st;
    if (blen < 4u) {
        return ST_BAD_LENGTH;
    }
    offset = get32(body);
    st = check_range(offset, blen - 4u, total_bytes(m->inputs, m->num_inputs), detail);
    if (st == ST_OK) {
        io_copy(m->inputs, m->num_inputs, offset, body + 4, blen - 4u, 1);
    }
    return st;
}

static uint8_t do_read_output(const tinyc_harness_model_t *m, const uint8_t *body, uint32_t blen,
                              uint8_t *out, uint32_t *len, uint32_t *detail)
{
    uint32_t offset;
    uint32_t n;
    uint8_t st;
    if (blen != 6u) {
        return ST_BAD_LENGTH;
    }
    offset = get32(body);
    n = get16(body + 4);
    if (n > MAX_PAYLOAD - 1u) {
        *detail = MAX_PAYLOAD - 1u;
        return ST_BAD_ARG;
    }
    st = check_range(offset, n, total_bytes(m->outputs, m->num_outputs), detail);
    if (st == ST_OK) {
        io_copy(m->outputs, m->num_outputs, offset, out, n, 0);
        *len = n;
    }
    return st;
}

static uint8_t do_run(const tinyc_harness_model_t *m, const uint8_t *body, uint32_t blen,
                      uint8_t *out, uint32_t *len, uint32_t *detail)
{
    uint32_t repeat;
    uint32_t r;
    uint64_t t0;
    uint64_t t1;
    int status = 0;
    if (blen != 4u) {
        return ST_BAD_LENGTH;
    }
    repeat = get32(body);
    if (repeat == 0) {
        return ST_BAD_ARG;
    }
    t0 = tinyc_port_cycles();
    for (r = 0; r < repeat && status == 0; ++r) {
        status = m->run();
    }
    t1 = tinyc_port_cycles();
    if (status != 0) {
        *detail = (uint32_t)status;
        return ST_MODEL_ERROR;
    }
    put64(out, t1 - t0);
    put32(out + 8, repeat);
    *len = 12u;
    return ST_OK;
}

static uint8_t do_profile(const tinyc_harness_model_t *m, uint32_t blen, uint8_t *out, uint32_t *len,
                          uint32_t *detail)
{
    uint32_t *ticks = m->profile_ticks;
    uint64_t t0;
    uint64_t prev;
    uint64_t now;
    uint32_t i;
    if (blen != 0) {
        return ST_BAD_LENGTH;
    }
    if (ticks == 0 || m->set_inputs == 0 || m->run_layer == 0 || m->get_outputs == 0) {
        return ST_UNSUPPORTED;
    }
    t0 = tinyc_port_cycles();
    m->set_inputs();
    prev = tinyc_port_cycles();
    ticks[0] = saturate32(prev - t0);
    for (i = 0; i < m->num_layers; ++i) {
        int status = m->run_layer((int32_t)i);
        now = tinyc_port_cycles();
        ticks[i + 1u] = saturate32(now - prev);
        prev = now;
        if (status != 0) {
            *detail = (uint32_t)status;
            return ST_MODEL_ERROR;
        }
    }
    m->get_outputs();
    now = tinyc_port_cycles();
    ticks[m->num_layers + 1u] = saturate32(now - prev);
    put64(out, now - t0);
    put32(out + 8, m->num_layers + 2u);
    *len = 12u;
    return ST_OK;
}

/* RUN_LAYER: set the inputs (untimed), run one layer `repeat` times timing each run, then copy
 * the outputs (untimed) so READ_OUTPUT shows that layer's result. The tuner's measurement: in a
 * candidate firmware every "layer" is one candidate schedule of the same kernel. */
static uint8_t do_run_layer(const tinyc_harness_model_t *m, const uint8_t *body, uint32_t blen,
                            uint8_t *out, uint32_t *len, uint32_t *detail)
{
    uint32_t index;
    uint32_t repeat;
    uint32_t r;
    if (blen != 8u) {
        return ST_BAD_LENGTH;
    }
    if (m->set_inputs == 0 || m->run_layer == 0 || m->get_outputs == 0) {
        return ST_UNSUPPORTED;
    }
    index = get32(body);
    repeat = get32(body + 4);
    if (index >= m->num_layers) {
        *detail = m->num_layers;
        return ST_BAD_RANGE;
    }
    if (repeat == 0u || repeat > (MAX_PAYLOAD - 5u) / 4u) {
        *detail = (MAX_PAYLOAD - 5u) / 4u;
        return ST_BAD_ARG;
    }
    m->set_inputs();
    for (r = 0; r < repeat; ++r) {
        uint64_t t0 = tinyc_port_cycles();
        int status = m->run_layer((int32_t)index);
        uint64_t t1 = tinyc_port_cycles();
        if (status != 0) {
            *detail = (uint32_t)status;
            return ST_MODEL_ERROR;
        }
        put32(out + 4u + 4u * r, saturate32(t1 - t0));
    }
    m->get_outputs();
    put32(out, repeat);
    *len = 4u + 4u * repeat;
    return ST_OK;
}

/* OUTPUT_CRC: the CRC-32 of an output byte range, so the host can check a large output (a tuning
 * candidate's) against the golden model without reading it over the link. */
static uint8_t do_output_crc(const tinyc_harness_model_t *m, const uint8_t *body, uint32_t blen,
                             uint8_t *out, uint32_t *len, uint32_t *detail)
{
    uint32_t offset;
    uint32_t n;
    uint32_t crc = 0xFFFFFFFFu;
    uint32_t k;
    uint8_t st;
    if (blen != 8u) {
        return ST_BAD_LENGTH;
    }
    offset = get32(body);
    n = get32(body + 4);
    st = check_range(offset, n, total_bytes(m->outputs, m->num_outputs), detail);
    if (st != ST_OK) {
        return st;
    }
    for (k = 0; k < m->num_outputs && n > 0; ++k) {
        uint32_t take;
        if (offset >= m->outputs[k].bytes) {
            offset -= m->outputs[k].bytes;
            continue;
        }
        take = m->outputs[k].bytes - offset;
        if (take > n) {
            take = n;
        }
        crc = crc32_update(crc, m->outputs[k].data + offset, take);
        n -= take;
        offset = 0;
    }
    put32(out, ~crc);
    *len = 4u;
    return ST_OK;
}

static uint8_t do_profile_read(const tinyc_harness_model_t *m, const uint8_t *body, uint32_t blen,
                               uint8_t *out, uint32_t *len, uint32_t *detail)
{
    uint32_t first;
    uint32_t count;
    uint32_t i;
    uint8_t st;
    if (blen != 6u) {
        return ST_BAD_LENGTH;
    }
    if (m->profile_ticks == 0) {
        return ST_UNSUPPORTED;
    }
    first = get32(body);
    count = get16(body + 4);
    if (count > (MAX_PAYLOAD - 1u) / 4u) {
        *detail = (MAX_PAYLOAD - 1u) / 4u;
        return ST_BAD_ARG;
    }
    st = check_range(first, count, m->num_layers + 2u, detail);
    if (st != ST_OK) {
        return st;
    }
    for (i = 0; i < count; ++i) {
        put32(out + 4u * i, m->profile_ticks[first + i]);
    }
    *len = 4u * count;
    return ST_OK;
}

static uint8_t do_layer_name(const tinyc_harness_model_t *m, const uint8_t *body, uint32_t blen,
                             uint8_t *out, uint32_t *len, uint32_t *detail)
{
    const char *name;
    uint32_t n = 0;
    uint32_t index;
    if (blen != 4u) {
        return ST_BAD_LENGTH;
    }
    index = get32(body);
    name = (m->layer_name != 0 && index < m->num_layers) ? m->layer_name((int32_t)index) : 0;
    if (name == 0) {
        *detail = m->num_layers;
        return ST_BAD_RANGE;
    }
    while (name[n] && n < MAX_PAYLOAD - 1u) {
        out[n] = (uint8_t)name[n];
        ++n;
    }
    *len = n;
    return ST_OK;
}

static void clear_io(const tinyc_harness_io_t *io, uint32_t count)
{
    uint32_t k;
    uint32_t i;
    for (k = 0; k < count; ++k) {
        for (i = 0; i < io[k].bytes; ++i) {
            io[k].data[i] = 0;
        }
    }
}

static uint8_t do_reset(const tinyc_harness_model_t *m, uint32_t blen)
{
    uint32_t i;
    if (blen != 0) {
        return ST_BAD_LENGTH;
    }
    clear_io(m->inputs, m->num_inputs);
    clear_io(m->outputs, m->num_outputs);
    if (m->profile_ticks != 0) {
        for (i = 0; i < m->num_layers + 2u; ++i) {
            m->profile_ticks[i] = 0;
        }
    }
    return ST_OK;
}

/* Handle one received frame (rx_buf, rx_len). Returns 1 when an EXIT was answered. */
static int handle_frame(const tinyc_harness_model_t *m, int *exit_code)
{
    int32_t decoded = tinyc_harness_cobs_decode(rx_buf, rx_len);
    uint32_t plen;
    uint32_t crc;
    uint32_t blen;
    uint32_t len = 0;
    uint32_t detail = 0;
    uint8_t cmd;
    uint8_t st;
    const uint8_t *body;
    uint8_t *out = pkt_buf + HDR_BYTES + 1u;
    if (decoded < 0) {
        frame_error(ST_BAD_COBS, rx_len);
        return 0;
    }
    if ((uint32_t)decoded < HDR_BYTES + CRC_BYTES) {
        frame_error(ST_TRUNCATED, (uint32_t)decoded);
        return 0;
    }
    plen = (uint32_t)decoded - CRC_BYTES;
    crc = get32(rx_buf + plen);
    if (tinyc_harness_crc32(rx_buf, plen) != crc) {
        frame_error(ST_BAD_CRC, (uint32_t)decoded);
        return 0;
    }
    cmd = rx_buf[0];
    /* A retry of the request just answered: send the same reply again, do not re-execute. */
    if (last_valid && cmd != CMD_HELLO && cmd == last_cmd && rx_buf[1] == last_seq && crc == last_crc) {
        tinyc_port_write(tx_buf, tx_len);
        return 0;
    }
    body = rx_buf + HDR_BYTES;
    blen = plen - HDR_BYTES;
    if (blen > MAX_PAYLOAD) {
        detail = MAX_PAYLOAD;
        st = ST_OVERSIZE;
    } else {
        switch (cmd) {
        case CMD_HELLO: st = do_hello(m, body, blen, out, &len, &detail); break;
        case CMD_WRITE_INPUT: st = do_write_input(m, rx_buf + HDR_BYTES, blen, &detail); break;
        case CMD_RUN: st = do_run(m, body, blen, out, &len, &detail); break;
        case CMD_READ_OUTPUT: st = do_read_output(m, body, blen, out, &len, &detail); break;
        case CMD_PROFILE: st = do_profile(m, blen, out, &len, &detail); break;
        case CMD_PROFILE_READ: st = do_profile_read(m, body, blen, out, &len, &detail); break;
        case CMD_LAYER_NAME: st = do_layer_name(m, body, blen, out, &len, &detail); break;
        case CMD_RUN_LAYER: st = do_run_layer(m, body, blen, out, &len, &detail); break;
        case CMD_OUTPUT_CRC: st = do_output_crc(m, body, blen, out, &len, &detail); break;
        case CMD_RESET: st = do_reset(m, blen); break;
        case CMD_EXIT:
            if (blen != 4u) {
                st = ST_BAD_LENGTH;
            } else {
                st = ST_OK;
                *exit_code = (int)(int32_t)get32(body);
            }
            break;
        default:
            st = ST_UNKNOWN_CMD;
            detail = cmd;
            break;
        }
    }
    pkt_buf[0] = (uint8_t)(cmd | REPLY_FLAG);
    pkt_buf[1] = rx_buf[1];
    pkt_buf[2] = st;
    if (st != ST_OK) {
        put32(out, detail);
        len = 4u;
    }
    last_cmd = cmd;
    last_seq = rx_buf[1];
    last_crc = crc;
    last_valid = 1;
    tx_len = send_packet(1u + len, tx_buf);
    return cmd == CMD_EXIT && st == ST_OK;
}

int tinyc_harness_serve(const tinyc_harness_model_t *model)
{
    int exit_code = 0;
    rx_len = 0;
    rx_overflow = 0;
    last_valid = 0;
    for (;;) {
        int c = tinyc_port_read_byte((rx_len || rx_overflow) ? TINYC_HARNESS_FRAME_TIMEOUT_MS : 1000u);
        if (c < 0) {
            /* Silence in the middle of a frame: its end was lost. */
            if (rx_len || rx_overflow) {
                frame_error(rx_overflow ? ST_OVERSIZE : ST_TRUNCATED, rx_overflow ? MAX_PAYLOAD : rx_len);
            }
            rx_len = 0;
            rx_overflow = 0;
            continue;
        }
        if (c == 0) {
            if (rx_overflow) {
                frame_error(ST_OVERSIZE, MAX_PAYLOAD);
            } else if (rx_len && handle_frame(model, &exit_code)) {
                return exit_code;
            }
            rx_len = 0;
            rx_overflow = 0;
            continue;
        }
        if (rx_len < RX_MAX) {
            rx_buf[rx_len++] = (uint8_t)c;
        } else {
            rx_overflow = 1;
        }
    }
}
