#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora for the NBD fuzzers in tests/fuzz/corpus/<target>/.

Seeds are well-formed protocol streams, so fuzzing starts from deep in the
protocol rather than from random bytes. Regression inputs (regress-*) are
committed beside them by hand and left alone here. Run from anywhere:
    python3 tests/fuzz/make_corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# NetworkBlockDevice/nbd doc/proto.md; the values in frontend/nbd_proto.h.
IHAVEOPT = 0x49484156454F5054
FIXED_NEWSTYLE, NO_ZEROES = 1, 2
OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_STARTTLS = 1, 2, 3, 5
OPT_INFO, OPT_GO, OPT_STRUCTURED_REPLY = 6, 7, 8
OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT = 9, 10
INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE = 1, 2, 3

REQUEST_MAGIC = 0x25609513
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_TRIM = 0, 1, 2, 3, 4
CMD_CACHE, CMD_WRITE_ZEROES, CMD_BLOCK_STATUS = 5, 6, 7
FLAG_FUA, FLAG_NO_HOLE, FLAG_DF, FLAG_REQ_ONE, FLAG_FAST_ZERO = 1, 2, 4, 8, 16


def client_flags(flags=FIXED_NEWSTYLE | NO_ZEROES):
    return struct.pack(">I", flags)


def option(opt, data=b""):
    return struct.pack(">QII", IHAVEOPT, opt, len(data)) + data


def name_and_infos(name, infos):
    n = name.encode()
    return struct.pack(">I", len(n)) + n + struct.pack(">H", len(infos)) + \
        b"".join(struct.pack(">H", i) for i in infos)


def meta_context(name, queries):
    n = name.encode()
    out = struct.pack(">I", len(n)) + n + struct.pack(">I", len(queries))
    for q in queries:
        out += struct.pack(">I", len(q)) + q.encode()
    return out


HANDSHAKE = {
    # What nbdinfo/qemu send: structured replies, a meta context, then GO.
    "go-structured-meta": client_flags()
    + option(OPT_STRUCTURED_REPLY)
    + option(OPT_SET_META_CONTEXT, meta_context("disk", ["base:allocation"]))
    + option(OPT_GO, name_and_infos("disk", [INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE])),
    "go-default-export": client_flags() + option(OPT_GO, name_and_infos("", [])),
    "list-then-abort": client_flags() + option(OPT_LIST) + option(OPT_ABORT),
    "info-then-go": client_flags()
    + option(OPT_INFO, name_and_infos("ro", [INFO_NAME, INFO_BLOCK_SIZE]))
    + option(OPT_INFO, name_and_infos("nosuch", []))
    + option(OPT_GO, name_and_infos("ro", [])),
    "list-meta-context": client_flags()
    + option(OPT_STRUCTURED_REPLY)
    + option(OPT_LIST_META_CONTEXT, meta_context("disk", ["base:"]))
    + option(OPT_LIST_META_CONTEXT, meta_context("disk", []))
    + option(OPT_GO, name_and_infos("disk", [])),
    # Old-style ending, with and without the 124 zero bytes.
    "export-name": client_flags() + option(OPT_EXPORT_NAME, b"ro"),
    "export-name-zeroes": client_flags(FIXED_NEWSTYLE) + option(OPT_EXPORT_NAME, b"disk"),
    "abort": client_flags() + option(OPT_ABORT),
    "refused-options": client_flags()
    + option(OPT_STARTTLS)
    + option(99, b"xyz")
    + option(OPT_SET_META_CONTEXT, meta_context("disk", ["base:allocation"]))
    + option(OPT_LIST, b"junk")
    + option(OPT_GO, b"\x00\x00\x00\x09short"),
    # An over-long option is answered and its data skipped (here cut short).
    "oversize-option": client_flags() + struct.pack(">QII", IHAVEOPT, OPT_INFO, 70000) + b"\0" * 64,
    # ... and in full, after which negotiation carries on (the one big seed).
    "oversize-option-skipped": client_flags()
    + struct.pack(">QII", IHAVEOPT, OPT_INFO, 65537) + b"\xff" * 65537
    + option(OPT_GO, name_and_infos("ro", [])),
}


def request(typ, offset, length, flags=0, cookie=0x1122334455667788, magic=REQUEST_MAGIC):
    return struct.pack(">IHHQQI", magic, flags, typ, cookie, offset, length)


def limits(size, min_block_shift, read_only=False, structured=False, base_alloc=False):
    bits = (1 if read_only else 0) | (2 if structured else 0) | (4 if base_alloc else 0)
    return struct.pack(">QBB", size, bits, min_block_shift)


GIB = 1 << 30
REQUESTS = {
    "read": request(CMD_READ, 4096, 4096) + limits(GIB, 9, structured=True),
    "read-df": request(CMD_READ, 0, 65536, FLAG_DF) + limits(GIB, 12, structured=True),
    "read-oversize": request(CMD_READ, 0, 64 << 20) + limits(GIB, 9, structured=True),
    "read-at-end": request(CMD_READ, GIB - 512, 512) + limits(GIB, 9) + limits(GIB - 1, 9),
    "write-fua": request(CMD_WRITE, 1 << 20, 32 << 20, FLAG_FUA) + limits(GIB, 9) + limits(GIB, 9, read_only=True),
    "flush": request(CMD_FLUSH, 0, 0) + limits(GIB, 9),
    "trim": request(CMD_TRIM, 8192, 1 << 24, FLAG_FUA) + limits(GIB, 12),
    "write-zeroes": request(CMD_WRITE_ZEROES, 0, 4096, FLAG_FUA | FLAG_NO_HOLE | FLAG_FAST_ZERO) + limits(GIB, 12),
    "block-status": request(CMD_BLOCK_STATUS, 0, 1 << 30, FLAG_REQ_ONE) + limits(GIB, 9, structured=True, base_alloc=True),
    "cache": request(CMD_CACHE, 512, 512) + limits(GIB, 9),
    "disc": request(CMD_DISC, 0, 0) + limits(GIB, 9),
    "wrapping-range": request(CMD_READ, (1 << 64) - 512, 1024) + limits((1 << 64) - 1, 9),
    "bad-magic": request(CMD_READ, 0, 512, magic=0x12345678) + limits(GIB, 9),
}


def write(target, seeds):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


# control_request_fuzz: the first byte picks the chunk size (1 + b % 64);
# the rest is a control-socket stream (doc/control.md), or an HTTP head.
CTL = "ubcache-ctl/1"
CONTROL = {
    "show": b"\x07" + f"{CTL} show\n".encode(),
    "pipelined": b"\x00" + f"{CTL} set sequential_cutoff 4M\n{CTL} get sequential_cutoff\n".encode(),
    "device-json-stats": b"\x10" + f"{CTL} device=disk1 format=json stats stats_total\n".encode(),
    "attach": b"\x3f" + f"{CTL} attach /dev/nvme0n1\n{CTL} detach\n".encode(),
    "crlf-spaces": b"\x05" + f"{CTL}   priority-stats\r\n".encode(),
    "bad-version": b"\x01" + b"ubcache-ctl/9 show\n",
    "usage": b"\x02" + f"{CTL} set sequential_cutoff\n{CTL} frobnicate\n".encode(),
    "oversize": b"\x3f" + f"{CTL} get ".encode() + b"x" * 5000 + b"\n",
    "http-get": b"\x09" + b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n",
    "frames": b"\x04" + b"progress 10\n0 B left..ok 5\nclean",
}

if __name__ == "__main__":
    write("nbd_handshake_fuzz", HANDSHAKE)
    write("nbd_request_fuzz", REQUESTS)
    write("control_request_fuzz", CONTROL)
