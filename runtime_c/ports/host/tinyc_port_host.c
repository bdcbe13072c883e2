/*
 * tinyc_port_host.c - tinyc_port.h for a desktop process, so that the serial harness can be
 * tested without a board: the "UART" is one TCP connection on 127.0.0.1 and the counter is
 * CLOCK_MONOTONIC in nanoseconds.
 *
 * Like an emulator's `-serial tcp:...,server=on,wait=on`, tinyc_port_init() listens and blocks
 * until one client connects. The port comes from the environment variable TINYC_PORT_LISTEN
 * (0 or unset: any free port). Once listening, one line "tinyc-port: listening on
 * 127.0.0.1:<port>" goes to stderr, so a test can start the process on port 0 and learn the
 * port without a race. When the client disconnects the process exits with status 0: a host
 * harness serves exactly one session.
 *
 * POSIX only (sockets, poll, clock_gettime); not part of firmware builds.
 */
#define _POSIX_C_SOURCE 200112L

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "tinyc_port.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

static int client_fd = -1;
static uint8_t in_buf[4096];
static size_t in_len;
static size_t in_pos;

static void fail(const char *what)
{
    fprintf(stderr, "tinyc-port: %s: %s\n", what, strerror(errno));
    exit(70);
}

void tinyc_port_init(void)
{
    const char *env = getenv("TINYC_PORT_LISTEN");
    long port = env ? strtol(env, 0, 10) : 0;
    struct sockaddr_in addr;
    socklen_t addr_len = sizeof addr;
    int one = 1;
    int fd;
    if (port < 0 || port > 65535) {
        fprintf(stderr, "tinyc-port: TINYC_PORT_LISTEN=%s is not a TCP port\n", env);
        exit(64);
    }
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        fail("socket");
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        fail("bind");
    }
    if (listen(fd, 1) != 0) {
        fail("listen");
    }
    if (getsockname(fd, (struct sockaddr *)&addr, &addr_len) != 0) {
        fail("getsockname");
    }
    fprintf(stderr, "tinyc-port: listening on 127.0.0.1:%u\n", (unsigned)ntohs(addr.sin_port));
    fflush(stderr);
    do {
        client_fd = accept(fd, 0, 0);
    } while (client_fd < 0 && errno == EINTR);
    if (client_fd < 0) {
        fail("accept");
    }
    close(fd);
    /* Replies are whole frames written at once: send them now, not after a delayed ACK. */
    (void)setsockopt(client_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void disconnected(void)
{
    fprintf(stderr, "tinyc-port: client disconnected\n");
    exit(0);
}

void tinyc_port_write(const uint8_t *data, uint32_t n)
{
    while (n > 0) {
        ssize_t sent = send(client_fd, data, n, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) {
            continue;
        }
        if (sent <= 0) {
            disconnected();
        }
        data += sent;
        n -= (uint32_t)sent;
    }
}

int tinyc_port_read_byte(uint32_t timeout_ms)
{
    if (in_pos == in_len) {
        struct pollfd p;
        ssize_t got;
        int ready;
        p.fd = client_fd;
        p.events = POLLIN;
        p.revents = 0;
        ready = poll(&p, 1, timeout_ms > 0x7FFFFFFFu ? 0x7FFFFFFF : (int)timeout_ms);
        if (ready == 0 || (ready < 0 && errno == EINTR)) {
            return -1;
        }
        if (ready < 0) {
            fail("poll");
        }
        got = recv(client_fd, in_buf, sizeof in_buf, 0);
        if (got < 0 && errno == EINTR) {
            return -1;
        }
        if (got <= 0) {
            disconnected();
        }
        in_len = (size_t)got;
        in_pos = 0;
    }
    return in_buf[in_pos++];
}

uint64_t tinyc_port_cycles(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void tinyc_port_exit(int code)
{
    if (client_fd >= 0) {
        close(client_fd);
        client_fd = -1;
    }
    exit(code);
}

const char *tinyc_port_board_name(void)
{
    return "host";
}
