"""Talking to boards: serial protocol, transports, flashers.

protocol: the wire format (COBS frames, CRC-32, commands; see docs/protocol.md).
transport: open_link(url) for anything pyserial opens, with a deadline on every read.
client: HarnessClient, the host side of the harness (retries, DeviceError, never hangs).
hostsim: build and run the harness as a desktop process (tests without a board).
flashers: start a firmware on an emulator or flash a real board.
"""
