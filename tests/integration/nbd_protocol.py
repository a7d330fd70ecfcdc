#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""nbd_protocol.py — raw-socket NBD protocol test for `ubcache serve`.

Speaks the NBD protocol byte by byte (stdlib only: socket, struct) so it can
send what no real client sends: bad magic, unknown options and commands,
unknown flags, out-of-range and unaligned requests, oversize lengths, half
headers, disconnects mid-payload. Each case checks the exact reply (option
reply type or errno) or the disconnect, then that the same connection still
works where the protocol says it must, and then — on a fresh connection —
that every byte of the export is what this script last wrote.

Usage: nbd_protocol.py --socket PATH --mode rw|ro [--size BYTES] [-k SUBSTR] [-v]
  rw: the export is writable and this script owns its contents.
  ro: the export was started with --read-only over zeroed memory.
Exit 0 if every case passes; otherwise prints each failure and exits 1.

Protocol reference: https://github.com/NetworkBlockDevice/nbd/blob/master/doc/proto.md
"""
import argparse
import random
import socket
import struct
import sys
import time
import traceback

# --- protocol constants
NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
OPT_REPLY_MAGIC = 0x3E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
STRUCTURED_REPLY_MAGIC = 0x668E33EF

FLAG_FIXED_NEWSTYLE = 1 << 0
FLAG_NO_ZEROES = 1 << 1

OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_PEEK_EXPORT, OPT_STARTTLS = 1, 2, 3, 4, 5
OPT_INFO, OPT_GO, OPT_STRUCTURED_REPLY = 6, 7, 8
OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT = 9, 10

REP_ACK, REP_SERVER, REP_INFO, REP_META_CONTEXT = 1, 2, 3, 4
REP_ERR = 1 << 31
REP_ERR_UNSUP, REP_ERR_POLICY, REP_ERR_INVALID = REP_ERR | 1, REP_ERR | 2, REP_ERR | 3
REP_ERR_PLATFORM, REP_ERR_TLS_REQD, REP_ERR_UNKNOWN = REP_ERR | 4, REP_ERR | 5, REP_ERR | 6
REP_ERR_SHUTDOWN, REP_ERR_BLOCK_SIZE_REQD, REP_ERR_TOO_BIG = REP_ERR | 7, REP_ERR | 8, REP_ERR | 9
REP_NAMES = {REP_ACK: "ACK", REP_SERVER: "SERVER", REP_INFO: "INFO", REP_META_CONTEXT: "META_CONTEXT",
             REP_ERR_UNSUP: "ERR_UNSUP", REP_ERR_POLICY: "ERR_POLICY", REP_ERR_INVALID: "ERR_INVALID",
             REP_ERR_PLATFORM: "ERR_PLATFORM", REP_ERR_TLS_REQD: "ERR_TLS_REQD",
             REP_ERR_UNKNOWN: "ERR_UNKNOWN", REP_ERR_SHUTDOWN: "ERR_SHUTDOWN",
             REP_ERR_BLOCK_SIZE_REQD: "ERR_BLOCK_SIZE_REQD", REP_ERR_TOO_BIG: "ERR_TOO_BIG"}

INFO_EXPORT, INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE = 0, 1, 2, 3

F_HAS_FLAGS, F_READ_ONLY, F_SEND_FLUSH, F_SEND_FUA = 1 << 0, 1 << 1, 1 << 2, 1 << 3
F_ROTATIONAL, F_SEND_TRIM, F_SEND_WRITE_ZEROES, F_SEND_DF = 1 << 4, 1 << 5, 1 << 6, 1 << 7
F_CAN_MULTI_CONN, F_SEND_RESIZE, F_SEND_CACHE, F_SEND_FAST_ZERO = 1 << 8, 1 << 9, 1 << 10, 1 << 11
# SEND_DF: the server always answers a READ with one chunk, so DF is free.
RW_FLAGS = (F_HAS_FLAGS | F_SEND_FLUSH | F_SEND_FUA | F_SEND_TRIM | F_SEND_WRITE_ZEROES |
            F_SEND_FAST_ZERO | F_SEND_CACHE | F_CAN_MULTI_CONN | F_SEND_DF)
RO_REQUIRED_FLAGS = F_HAS_FLAGS | F_READ_ONLY | F_SEND_FLUSH | F_SEND_CACHE | F_CAN_MULTI_CONN

CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_TRIM, CMD_CACHE = 0, 1, 2, 3, 4, 5
CMD_WRITE_ZEROES, CMD_BLOCK_STATUS, CMD_RESIZE = 6, 7, 8
CMD_NAMES = {0: "READ", 1: "WRITE", 2: "DISC", 3: "FLUSH", 4: "TRIM", 5: "CACHE",
             6: "WRITE_ZEROES", 7: "BLOCK_STATUS", 8: "RESIZE"}
CMDF_FUA, CMDF_NO_HOLE, CMDF_DF, CMDF_REQ_ONE, CMDF_FAST_ZERO = 1, 2, 4, 8, 16

RT_NONE, RT_OFFSET_DATA, RT_OFFSET_HOLE, RT_BLOCK_STATUS = 0, 1, 2, 5
RT_ERROR, RT_ERROR_OFFSET = (1 << 15) | 1, (1 << 15) | 2
RF_DONE = 1
STATE_HOLE, STATE_ZERO = 1, 2

EPERM, EIO, ENOMEM, EINVAL, ENOSPC, EOVERFLOW, ENOTSUP, ESHUTDOWN = 1, 5, 12, 22, 28, 75, 95, 108
ERRNO_NAMES = {0: "OK", 1: "EPERM", 5: "EIO", 12: "ENOMEM", 22: "EINVAL", 28: "ENOSPC",
               75: "EOVERFLOW", 95: "ENOTSUP", 108: "ESHUTDOWN"}

MIB = 1 << 20
MAX_BLOCK = 32 * MIB
EXPORT = b"ubcache"


def ename(e):
    return f"{ERRNO_NAMES.get(e, '?')}({e})"


def rname(t):
    return f"{REP_NAMES.get(t, '?')}({t:#x})"


class Fail(Exception):
    pass


class Closed(Exception):
    """The server closed the connection."""


def check(cond, msg):
    if not cond:
        raise Fail(msg)


# --- a minimal client
class Reply:
    def __init__(self, handle, cmd, offset, length):
        self.handle, self.cmd, self.offset, self.length = handle, cmd, offset, length
        self.error = 0
        self.simple = None
        self.chunks = []          # (type, flags, payload) for structured replies
        self.data = None          # READ: the bytes, assembled
        self.filled = []          # READ structured: (offset, length) covered
        self.extents = []         # BLOCK_STATUS: (context id, [(len, flags)...])
        self.message = b""


class Client:
    def __init__(self, path, timeout=15.0):
        self.path = path
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.structured = False
        self.size = None
        self.flags = None
        self.meta_ids = {}
        self.pending = {}          # handle → Reply being received
        self.next_handle = 0x1000
        self.sent = []             # hex of the last requests sent, for failure messages

    # raw I/O
    def send(self, data):
        self.s.sendall(data)

    def recv_exact(self, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            r = self.s.recv_into(view[got:], n - got)
            if r == 0:
                raise Closed(f"server closed the connection ({got} of {n} bytes received)")
            got += r
        return bytes(buf)

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def expect_eof(self, what, timeout=5.0):
        """The server must close the connection (it may send bytes first)."""
        self.s.settimeout(timeout)
        try:
            while True:
                if not self.s.recv(65536):
                    return
        except socket.timeout:
            raise Fail(f"{what}: server did not close the connection within {timeout}s")
        except ConnectionResetError:
            return

    def last_sent(self):
        return " | ".join(self.sent[-2:])

    # handshake
    def greeting(self):
        magic, opt_magic, hflags = struct.unpack(">QQH", self.recv_exact(18))
        check(magic == NBDMAGIC, f"greeting magic {magic:#x}")
        check(opt_magic == IHAVEOPT, f"greeting IHAVEOPT {opt_magic:#x} (not fixed newstyle?)")
        return hflags

    def client_flags(self, flags=FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES):
        self.send(struct.pack(">I", flags))

    def send_opt(self, opt, data=b"", magic=IHAVEOPT, length=None):
        hdr = struct.pack(">QII", magic, opt, len(data) if length is None else length)
        self.sent.append(f"option {opt} len {len(data) if length is None else length}: "
                         f"{(hdr + data[:64]).hex()}")
        self.send(hdr + data)

    def recv_opt_reply(self, opt):
        magic, ropt, rtype, length = struct.unpack(">QIII", self.recv_exact(20))
        check(magic == OPT_REPLY_MAGIC, f"option reply magic {magic:#x}")
        check(ropt == opt, f"option reply for option {ropt}, expected {opt}")
        check(length <= 16 * MIB, f"option reply length {length} absurd")
        return rtype, self.recv_exact(length)

    def opt_replies(self, opt):
        """Replies to one option up to and including the final ACK or error."""
        out = []
        while True:
            rtype, data = self.recv_opt_reply(opt)
            out.append((rtype, data))
            if rtype == REP_ACK or rtype & REP_ERR:
                return out

    def opt_expect_error(self, opt, data, want, what, length=None, partial_ok=False):
        """partial_ok: META_CONTEXT replies may precede the error (a server
        may answer queries one by one and meet the bad one later)."""
        self.send_opt(opt, data, length=length)
        replies = self.opt_replies(opt)
        got = replies[-1][0]
        early_ok = all(t == REP_META_CONTEXT for t, _ in replies[:-1]) if partial_ok else len(replies) == 1
        check(got == want and early_ok,
              f"{what}: sent [{self.sent[-1]}]: expected {rname(want)}, got "
              f"{', '.join(rname(t) for t, _ in replies)}")

    @staticmethod
    def go_data(name, infos=()):
        return struct.pack(">I", len(name)) + name + struct.pack(">H", len(infos)) + \
            b"".join(struct.pack(">H", i) for i in infos)

    def go(self, name=b"", infos=(), opt=OPT_GO):
        """GO/INFO; returns {info type: payload}; raises Fail on an error reply."""
        self.send_opt(opt, self.go_data(name, infos))
        info = {}
        for rtype, data in self.opt_replies(opt):
            if rtype & REP_ERR:
                raise Fail(f"{'GO' if opt == OPT_GO else 'INFO'} {name!r}: {rname(rtype)} {data!r}")
            if rtype == REP_INFO:
                check(len(data) >= 2, "short NBD_REP_INFO")
                (itype,) = struct.unpack(">H", data[:2])
                info[itype] = data[2:]
            else:
                check(rtype == REP_ACK, f"unexpected reply {rname(rtype)} to GO/INFO")
        check(INFO_EXPORT in info, "GO/INFO without NBD_INFO_EXPORT")
        check(len(info[INFO_EXPORT]) == 10, f"NBD_INFO_EXPORT length {len(info[INFO_EXPORT])}")
        if opt == OPT_GO:
            self.size, self.flags = struct.unpack(">QH", info[INFO_EXPORT])
        return info

    def structured_reply(self):
        self.send_opt(OPT_STRUCTURED_REPLY)
        rtype, data = self.recv_opt_reply(OPT_STRUCTURED_REPLY)
        check(rtype == REP_ACK and data == b"",
              f"STRUCTURED_REPLY: expected ACK, got {rname(rtype)}")
        self.structured = True

    @staticmethod
    def meta_data(name, queries):
        return struct.pack(">I", len(name)) + name + struct.pack(">I", len(queries)) + \
            b"".join(struct.pack(">I", len(q)) + q for q in queries)

    def meta_context(self, opt, name, queries):
        """Returns {context name: id}; raises Fail on an error."""
        self.send_opt(opt, self.meta_data(name, queries))
        out = {}
        for rtype, data in self.opt_replies(opt):
            if rtype & REP_ERR:
                raise Fail(f"meta context option {opt}: {rname(rtype)}")
            if rtype == REP_META_CONTEXT:
                (cid,) = struct.unpack(">I", data[:4])
                out[data[4:].decode()] = cid
        return out

    def handshake(self, name=b"", structured=False, meta=False):
        hflags = self.greeting()
        check(hflags & FLAG_FIXED_NEWSTYLE, "server lacks NBD_FLAG_FIXED_NEWSTYLE")
        self.client_flags()
        if structured:
            self.structured_reply()
        if meta:
            self.meta_ids = self.meta_context(OPT_SET_META_CONTEXT, name, [b"base:allocation"])
            check("base:allocation" in self.meta_ids,
                  f"SET_META_CONTEXT base:allocation not selected: {self.meta_ids}")
        self.go(name, (INFO_BLOCK_SIZE,))
        return self

    # transmission
    def send_req(self, cmd, offset, length, flags=0, payload=b"", handle=None, magic=REQUEST_MAGIC):
        if handle is None:
            handle = self.next_handle
            self.next_handle += 1
        hdr = struct.pack(">IHHQQI", magic, flags, cmd, handle, offset, length)
        self.sent.append(f"{CMD_NAMES.get(cmd, cmd)} flags={flags:#x} off={offset} len={length}"
                         f"{' +%d payload bytes' % len(payload) if payload else ''}: {hdr.hex()}")
        del self.sent[:-8]
        self.pending[handle] = Reply(handle, cmd, offset, length)
        self.send(hdr + payload)
        return handle

    def recv_reply(self):
        """Reads until some request's reply is complete; returns its Reply."""
        while True:
            (magic,) = struct.unpack(">I", self.recv_exact(4))
            if magic == SIMPLE_REPLY_MAGIC:
                error, handle = struct.unpack(">IQ", self.recv_exact(12))
                r = self.pending.pop(handle, None)
                check(r is not None, f"simple reply for unknown handle {handle:#x}")
                r.simple, r.error = True, error
                if r.cmd == CMD_READ and error == 0:
                    check(not self.structured,
                          "simple reply with data to READ after structured replies were negotiated")
                    r.data = self.recv_exact(r.length)
                return r
            check(magic == STRUCTURED_REPLY_MAGIC, f"reply magic {magic:#x}")
            check(self.structured, "structured reply chunk without STRUCTURED_REPLY negotiated")
            rflags, rtype, handle, length = struct.unpack(">HHQI", self.recv_exact(16))
            r = self.pending.get(handle)
            check(r is not None, f"structured chunk for unknown handle {handle:#x}")
            check(length <= MAX_BLOCK + 64, f"chunk length {length} too large")
            payload = self.recv_exact(length)
            r.simple = False
            r.chunks.append((rtype, rflags, payload))
            self._chunk(r, rtype, payload)
            if rflags & RF_DONE:
                del self.pending[handle]
                if r.cmd == CMD_READ and r.error == 0:
                    covered = sorted(r.filled)
                    pos = r.offset
                    for off, ln in covered:
                        check(off == pos, f"READ chunks leave a gap or overlap at {pos} (next {off})")
                        pos += ln
                    check(pos == r.offset + r.length,
                          f"READ chunks cover {r.offset}..{pos}, expected ..{r.offset + r.length}")
                return r

    def _chunk(self, r, rtype, p):
        if rtype == RT_NONE:
            check(p == b"", "NONE chunk with payload")
        elif rtype == RT_OFFSET_DATA:
            check(r.cmd == CMD_READ, "OFFSET_DATA for a non-READ")
            (off,) = struct.unpack(">Q", p[:8])
            data = p[8:]
            self._fill(r, off, data)
        elif rtype == RT_OFFSET_HOLE:
            check(r.cmd == CMD_READ and len(p) == 12, "bad OFFSET_HOLE")
            off, ln = struct.unpack(">QI", p)
            self._fill(r, off, bytes(ln))
        elif rtype == RT_BLOCK_STATUS:
            check(r.cmd == CMD_BLOCK_STATUS, "BLOCK_STATUS chunk for another command")
            check(len(p) >= 12 and (len(p) - 4) % 8 == 0, f"BLOCK_STATUS chunk length {len(p)}")
            (cid,) = struct.unpack(">I", p[:4])
            ext = [struct.unpack(">II", p[i:i + 8]) for i in range(4, len(p), 8)]
            r.extents.append((cid, ext))
        elif rtype in (RT_ERROR, RT_ERROR_OFFSET):
            err, mlen = struct.unpack(">IH", p[:6])
            check(err != 0, "error chunk with error 0")
            r.error = r.error or err
            r.message = p[6:6 + mlen]
        else:
            raise Fail(f"unknown structured reply type {rtype}")

    @staticmethod
    def _fill(r, off, data):
        check(r.offset <= off and off + len(data) <= r.offset + r.length,
              f"READ chunk {off}+{len(data)} outside request {r.offset}+{r.length}")
        if r.data is None:
            r.data = bytearray(r.length)
        r.data[off - r.offset:off - r.offset + len(data)] = data
        r.filled.append((off, len(data)))

    def cmd(self, cmd, offset, length, flags=0, payload=b""):
        h = self.send_req(cmd, offset, length, flags, payload)
        r = self.recv_reply()
        check(r.handle == h, f"reply handle {r.handle:#x}, expected {h:#x}")
        return r

    def expect_errno(self, want, cmd, offset, length, flags=0, payload=b"", what=""):
        r = self.cmd(cmd, offset, length, flags, payload)
        wants = want if isinstance(want, tuple) else (want,)
        check(r.error in wants,
              f"{what or CMD_NAMES.get(cmd, cmd)}: sent [{self.sent[-1]}]: expected "
              f"{' or '.join(ename(w) for w in wants)}, got {ename(r.error)}"
              f"{' ' + repr(r.message) if r.message else ''}")
        return r

    def read(self, offset, length):
        r = self.cmd(CMD_READ, offset, length)
        check(r.error == 0, f"READ off={offset} len={length}: {ename(r.error)}")
        return bytes(r.data)

    def write(self, offset, data, flags=0):
        r = self.cmd(CMD_WRITE, offset, len(data), flags, data)
        check(r.error == 0, f"WRITE off={offset} len={len(data)}: {ename(r.error)}")

    def disc(self):
        try:
            self.send_req(CMD_DISC, 0, 0)
        except OSError:
            pass
        self.close()


# --- the test context
class Ctx:
    def __init__(self, args):
        self.path = args.socket
        self.mode = args.mode
        self.size = args.size
        self.verbose = args.verbose
        self.only = args.only
        self.image = bytearray(self.size)   # what the export must hold

    def connect(self, **kw):
        return Client(self.path, **kw)

    def conn(self, **kw):
        return Client(self.path).handshake(**kw)

    def write_image(self, c, offset, data, flags=0):
        c.write(offset, data, flags)
        self.image[offset:offset + len(data)] = data

    def sanity(self, c, what):
        """The same connection still answers a READ correctly."""
        off = 7 * 4096
        try:
            got = c.read(off, 8192)
        except (Closed, OSError) as e:
            raise Fail(f"{what}: connection unusable afterwards ({e}); last sent [{c.last_sent()}]")
        check(got == self.image[off:off + 8192], f"{what}: READ afterwards returned wrong data")

    def resync(self):
        """After a failed case, take the export's contents as the new truth so
        later cases are not blamed for it."""
        c = self.conn()
        for off in range(0, self.size, 8 * MIB):
            self.image[off:off + 8 * MIB] = c.read(off, 8 * MIB)
        c.disc()

    def verify_export(self, what):
        """A fresh connection reads the whole export; it must equal self.image."""
        try:
            c = self.conn()
        except (OSError, Closed) as e:
            raise Fail(f"after {what}: a fresh connection failed: {e}")
        try:
            check(c.size == self.size, f"after {what}: export size {c.size}, expected {self.size}")
            step = 8 * MIB
            for off in range(0, self.size, step):
                got = c.read(off, step)
                want = self.image[off:off + step]
                if got != want:
                    i = next(i for i in range(step) if got[i] != want[i])
                    raise Fail(f"after {what}: byte {off + i} is {got[i]:#04x}, expected "
                               f"{want[i]:#04x} (data on the export changed)")
        finally:
            c.disc()


TESTS = []


def case(mode="rw"):
    def deco(fn):
        TESTS.append((fn.__name__, mode, fn))
        return fn
    return deco


# ---------------------------------------------------------------- handshake
@case("any")
def greeting_is_fixed_newstyle_with_no_zeroes(ctx):
    c = ctx.connect()
    hflags = c.greeting()
    check(hflags & FLAG_FIXED_NEWSTYLE, f"handshake flags {hflags:#x} lack FIXED_NEWSTYLE")
    check(hflags & FLAG_NO_ZEROES, f"handshake flags {hflags:#x} lack NO_ZEROES")
    c.close()


@case("any")
def opt_list_names_the_export(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    c.send_opt(OPT_LIST)
    names = []
    for rtype, data in c.opt_replies(OPT_LIST):
        check(rtype in (REP_SERVER, REP_ACK), f"LIST: reply {rname(rtype)}")
        if rtype == REP_SERVER:
            (n,) = struct.unpack(">I", data[:4])
            check(4 + n <= len(data), "LIST: name length exceeds reply")
            names.append(data[4:4 + n])
    check(names == [EXPORT], f"LIST: exports {names}, expected [{EXPORT!r}]")
    # The option phase continues after LIST.
    c.go(b"")
    ctx.sanity(c, "GO after LIST")
    c.disc()


@case("any")
def opt_info_reports_export_name_description_block_size(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    for name in (EXPORT, b""):
        info = c.go(name, (INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE), opt=OPT_INFO)
        size, flags = struct.unpack(">QH", info[INFO_EXPORT])
        check(size == ctx.size, f"INFO {name!r}: size {size}, expected {ctx.size}")
        need = RW_FLAGS if ctx.mode == "rw" else RO_REQUIRED_FLAGS
        check(flags & need == need, f"INFO {name!r}: transmission flags {flags:#06x} lack {need:#06x}")
        check(info.get(INFO_NAME) == EXPORT, f"INFO {name!r}: NBD_INFO_NAME {info.get(INFO_NAME)!r}")
        check(INFO_DESCRIPTION in info, f"INFO {name!r}: no NBD_INFO_DESCRIPTION")
        info[INFO_DESCRIPTION].decode("utf-8")
        check(INFO_BLOCK_SIZE in info and len(info[INFO_BLOCK_SIZE]) == 12,
              f"INFO {name!r}: no/short NBD_INFO_BLOCK_SIZE")
        bs = struct.unpack(">III", info[INFO_BLOCK_SIZE])
        check(bs == (512, 4096, MAX_BLOCK), f"INFO {name!r}: block sizes {bs}, expected (512, 4096, {MAX_BLOCK})")
    # INFO leaves the option phase open: GO still works.
    info = c.go(b"", (INFO_BLOCK_SIZE,))
    check(c.size == ctx.size, "GO after INFO: wrong size")
    ctx.sanity(c, "GO after INFO")
    c.disc()


@case("any")
def transmission_flags_are_exactly_the_interface_set(ctx):
    c = ctx.conn()
    want = RW_FLAGS if ctx.mode == "rw" else RW_FLAGS | F_READ_ONLY
    names = {F_HAS_FLAGS: "HAS_FLAGS", F_READ_ONLY: "READ_ONLY", F_SEND_FLUSH: "SEND_FLUSH",
             F_SEND_FUA: "SEND_FUA", F_ROTATIONAL: "ROTATIONAL", F_SEND_TRIM: "SEND_TRIM",
             F_SEND_WRITE_ZEROES: "SEND_WRITE_ZEROES", F_SEND_DF: "SEND_DF",
             F_CAN_MULTI_CONN: "CAN_MULTI_CONN", F_SEND_RESIZE: "SEND_RESIZE",
             F_SEND_CACHE: "SEND_CACHE", F_SEND_FAST_ZERO: "SEND_FAST_ZERO"}
    extra = [names.get(1 << b, f"bit{b}") for b in range(16) if (c.flags & ~want) >> b & 1]
    missing = [names.get(1 << b, f"bit{b}") for b in range(16) if (want & ~c.flags) >> b & 1]
    if ctx.mode == "ro":   # write-side flags are not promised on a read-only export
        missing = [m for m in missing if m not in ("SEND_FUA", "SEND_TRIM", "SEND_WRITE_ZEROES",
                                                   "SEND_FAST_ZERO")]
    check(not extra and not missing, f"transmission flags {c.flags:#06x}, interface says "
                                     f"{want:#06x}: extra {extra}, missing {missing}")
    c.disc()


@case("any")
def go_and_info_for_unknown_export_reply_err_unknown(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    for opt in (OPT_INFO, OPT_GO):
        c.opt_expect_error(opt, Client.go_data(b"nosuch"), REP_ERR_UNKNOWN, f"option {opt} 'nosuch'")
        c.opt_expect_error(opt, Client.go_data(b"ubcache2"), REP_ERR_UNKNOWN, f"option {opt} 'ubcache2'")
    c.go(EXPORT)
    ctx.sanity(c, "GO after ERR_UNKNOWN")
    c.disc()


@case("any")
def unknown_options_reply_err_unsup_and_negotiation_continues(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    c.opt_expect_error(0x7777, b"\x01\x02\x03\x04", REP_ERR_UNSUP, "unknown option 0x7777")
    c.opt_expect_error(OPT_PEEK_EXPORT, b"", REP_ERR_UNSUP, "withdrawn option PEEK_EXPORT")
    c.opt_expect_error(0x80000001, b"", REP_ERR_UNSUP, "unknown option 0x80000001")
    # Its data is read and discarded: the next option parses.
    c.opt_expect_error(0x7778, bytes(range(256)) * 16, REP_ERR_UNSUP, "unknown option with 4 KiB data")
    # A server may refuse absurd option lengths as too big, but must stay in sync.
    c.send_opt(0x7779, bytes(range(256)) * 4096)
    replies = c.opt_replies(0x7779)
    check(len(replies) == 1 and replies[0][0] in (REP_ERR_UNSUP, REP_ERR_TOO_BIG),
          f"unknown option with 1 MiB data: {[rname(t) for t, _ in replies]}")
    c.go(b"")
    ctx.sanity(c, "GO after unknown options")
    c.disc()


@case("any")
def malformed_options_reply_err_invalid(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    gd = Client.go_data
    bad = [
        (OPT_LIST, b"\0\0\0\0", "LIST with 4 bytes of data"),
        (OPT_STRUCTURED_REPLY, b"\0", "STRUCTURED_REPLY with 1 byte of data"),
        (OPT_GO, b"\0\0", "GO with 2 bytes (no name length)"),
        (OPT_GO, struct.pack(">I", 1000) + b"ubcache\0\0", "GO name length 1000 > data"),
        (OPT_GO, struct.pack(">I", 7) + EXPORT, "GO without the info count"),
        (OPT_GO, struct.pack(">I", 7) + EXPORT + struct.pack(">HH", 3, INFO_NAME), "GO info count 3, 1 given"),
        (OPT_GO, gd(EXPORT, (INFO_NAME,)) + b"\x00", "GO with a trailing byte"),
        (OPT_INFO, b"\0\0\0", "INFO with 3 bytes"),
        (OPT_INFO, struct.pack(">I", 0xFFFFFFFF) + b"\0\0", "INFO name length 2^32-1"),
        (OPT_INFO, struct.pack(">I", 0) + struct.pack(">HH", 2, INFO_NAME), "INFO info count 2, 1 given"),
        (OPT_SET_META_CONTEXT, Client.meta_data(EXPORT, [b"base:allocation"]),
         "SET_META_CONTEXT before STRUCTURED_REPLY"),
    ]
    for opt, data, what in bad:
        c.opt_expect_error(opt, data, REP_ERR_INVALID, what)
    c.structured_reply()
    md = Client.meta_data(EXPORT, [b"base:allocation"])
    for opt in (OPT_SET_META_CONTEXT, OPT_LIST_META_CONTEXT):
        c.opt_expect_error(opt, md[:-3], REP_ERR_INVALID, f"meta option {opt} truncated query",
                           partial_ok=True)
        c.opt_expect_error(opt, md[:6], REP_ERR_INVALID, f"meta option {opt} truncated name")
        c.opt_expect_error(opt, struct.pack(">I", 7) + EXPORT + struct.pack(">I", 2) + md[-19:],
                           REP_ERR_INVALID, f"meta option {opt} query count 2, 1 given", partial_ok=True)
    c.go(b"")
    ctx.sanity(c, "GO after malformed options")
    c.disc()


@case("any")
def huge_option_length_does_not_stall_other_clients(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    c.send_opt(0x7779, b"", length=0x7FFFFFF0)   # claim 2 GiB, send 4 KiB
    try:
        c.send(b"x" * 4096)
    except OSError:
        pass   # the server may close at once
    # Whatever this connection gets (error reply, close, or a wait for the
    # rest), another client is served meanwhile.
    other = ctx.conn()
    ctx.sanity(other, "another connection while one claims a 2 GiB option")
    other.disc()
    c.close()


@case("any")
def bad_option_magic_closes_connection(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    c.send_opt(OPT_GO, Client.go_data(b""), magic=0x1122334455667788)
    # The stream cannot be resynchronised: the server closes (an error reply
    # first is tolerated, a successful GO is not).
    c.s.settimeout(5)
    try:
        rtype, _ = c.recv_opt_reply(OPT_GO)
        check(rtype & REP_ERR, f"option with bad magic got {rname(rtype)}")
    except (Closed, ConnectionResetError):
        return
    c.expect_eof("option header with magic 0x1122334455667788")


@case("any")
def unknown_client_flags_close_connection(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES | 0x40000000)
    try:
        c.send_opt(OPT_GO, Client.go_data(b""))
    except OSError:
        pass
    c.expect_eof("client flags 0x40000003 (unknown bit 30)")


@case("any")
def opt_abort_ends_the_connection(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    c.send_opt(OPT_ABORT)
    c.s.settimeout(5)
    try:
        rtype, data = c.recv_opt_reply(OPT_ABORT)
        check(rtype == REP_ACK, f"ABORT: reply {rname(rtype)}, expected ACK or close")
    except (Closed, ConnectionResetError):
        return
    c.expect_eof("after ABORT's ACK")


def export_name_path(ctx, client_flags, name):
    c = ctx.connect()
    c.greeting()
    c.client_flags(client_flags)
    c.send_opt(OPT_EXPORT_NAME, name)
    size, flags = struct.unpack(">QH", c.recv_exact(10))
    check(size == ctx.size, f"EXPORT_NAME {name!r}: size {size}, expected {ctx.size}")
    need = RW_FLAGS if ctx.mode == "rw" else RO_REQUIRED_FLAGS
    check(flags & need == need, f"EXPORT_NAME: flags {flags:#06x} lack {need:#06x}")
    if not client_flags & FLAG_NO_ZEROES:
        pad = c.recv_exact(124)
        check(pad == bytes(124), "EXPORT_NAME: the 124 padding bytes are not zero")
    # With NO_ZEROES nothing follows: the first bytes after a READ are its reply.
    ctx.sanity(c, f"EXPORT_NAME {name!r} client flags {client_flags:#x}")
    c.disc()


@case("any")
def export_name_honours_no_zeroes(ctx):
    export_name_path(ctx, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES, EXPORT)


@case("any")
def export_name_without_no_zeroes_sends_124_zero_bytes(ctx):
    export_name_path(ctx, FLAG_FIXED_NEWSTYLE, b"")


@case("any")
def export_name_unknown_closes_connection(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    c.send_opt(OPT_EXPORT_NAME, b"nosuch")
    c.expect_eof("EXPORT_NAME 'nosuch'")


@case("any")
def meta_contexts_list_and_set_base_allocation(ctx):
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    c.structured_reply()
    listed = c.meta_context(OPT_LIST_META_CONTEXT, EXPORT, [])
    check("base:allocation" in listed, f"LIST_META_CONTEXT (all): {listed}")
    listed = c.meta_context(OPT_LIST_META_CONTEXT, b"", [b"base:"])
    check("base:allocation" in listed, f"LIST_META_CONTEXT 'base:': {listed}")
    chosen = c.meta_context(OPT_SET_META_CONTEXT, EXPORT, [b"nosuch:thing", b"base:allocation"])
    check(list(chosen) == ["base:allocation"], f"SET_META_CONTEXT chose {chosen}")
    c.go(EXPORT)
    cid = chosen["base:allocation"]
    # Over a written (non-zero) range.
    for off, ln, fl in ((0, MIB, 0), (3 * 4096, 8192, 0), (MIB, 4 * MIB, CMDF_REQ_ONE),
                        (ctx.size - 4096, 4096, 0)):
        r = c.cmd(CMD_BLOCK_STATUS, off, ln, fl)
        check(r.error == 0, f"BLOCK_STATUS off={off} len={ln}: {ename(r.error)} {r.message!r}")
        check(len(r.extents) == 1, f"BLOCK_STATUS: {len(r.extents)} BLOCK_STATUS chunks for one context")
        rid, ext = r.extents[0]
        check(rid == cid, f"BLOCK_STATUS: context id {rid}, negotiated {cid}")
        check(ext, "BLOCK_STATUS: no descriptors")
        if fl & CMDF_REQ_ONE:
            check(len(ext) == 1, f"BLOCK_STATUS REQ_ONE: {len(ext)} descriptors")
        total = 0
        for i, (elen, eflags) in enumerate(ext):
            check(elen > 0 and elen % 512 == 0, f"BLOCK_STATUS: descriptor length {elen}")
            check(eflags & ~3 == 0, f"BLOCK_STATUS: unknown status bits {eflags:#x}")
            check(total < ln, f"BLOCK_STATUS: descriptor {i} starts past the requested range")
            seg = ctx.image[off + total:off + min(total + elen, ln)]
            if eflags & STATE_ZERO:
                check(seg.count(0) == len(seg),
                      f"BLOCK_STATUS: {off + total}+{elen} marked ZERO but holds data")
            total += elen
        check(off + total <= ctx.size, f"BLOCK_STATUS: descriptors run past the end ({off}+{total})")
    c.expect_errno(EINVAL, CMD_BLOCK_STATUS, ctx.size - 512, 1024, what="BLOCK_STATUS past the end")
    c.expect_errno(EINVAL, CMD_BLOCK_STATUS, ctx.size, 512, what="BLOCK_STATUS at the end")
    ctx.sanity(c, "BLOCK_STATUS")
    c.disc()


@case("any")
def block_status_without_meta_context_is_einval(ctx):
    c = ctx.conn(structured=True)
    c.expect_errno(EINVAL, CMD_BLOCK_STATUS, 0, 4096, what="BLOCK_STATUS with no context negotiated")
    ctx.sanity(c, "BLOCK_STATUS without context")
    c.disc()


@case("any")
def structured_read_returns_offset_data_chunks(ctx):
    c = ctx.conn(structured=True)
    for off, ln in ((0, 4096), (512, 512), (MIB + 4096, 3 * MIB), (0, MAX_BLOCK), (ctx.size - 8192, 8192)):
        r = c.cmd(CMD_READ, off, ln)
        check(r.error == 0, f"structured READ off={off} len={ln}: {ename(r.error)}")
        check(r.simple is False, "READ answered with a simple reply after STRUCTURED_REPLY")
        types = {t for t, _, _ in r.chunks}
        check(types <= {RT_OFFSET_DATA, RT_OFFSET_HOLE, RT_NONE}, f"READ chunk types {types}")
        if ctx.image[off:off + ln].count(0) != ln:
            check(RT_OFFSET_DATA in types, "READ of data without an OFFSET_DATA chunk")
        check(r.chunks[-1][1] & RF_DONE and all(not f & RF_DONE for _, f, _ in r.chunks[:-1]),
              "READ: DONE flag not (only) on the last chunk")
        check(r.data == ctx.image[off:off + ln], f"structured READ off={off} len={ln}: wrong data")
    # Errors come as an error chunk (or simple error reply) with the errno.
    r = c.expect_errno(EOVERFLOW, CMD_READ, 0, MAX_BLOCK + 512, what="structured READ of 32 MiB + 512")
    r = c.expect_errno(EINVAL, CMD_READ, ctx.size - 512, 1024, what="structured READ past the end")
    ctx.sanity(c, "structured errors")
    c.disc()


@case("any")
def read_with_df_is_one_chunk_if_df_advertised(ctx):
    c = ctx.conn(structured=True)
    if not c.flags & F_SEND_DF:
        c.disc()
        return   # not advertised: nothing promised (the flags case checks the set)
    for off, ln in ((0, 4096), (4096, 65536), (MIB, MIB)):
        r = c.cmd(CMD_READ, off, ln, CMDF_DF)
        if r.error == EOVERFLOW and ln > 65536:
            continue   # allowed by the spec above 64 KiB
        check(r.error == 0, f"READ DF off={off} len={ln}: {ename(r.error)}")
        content = [t for t, _, _ in r.chunks if t in (RT_OFFSET_DATA, RT_OFFSET_HOLE)]
        check(len(content) == 1, f"READ DF off={off} len={ln}: {len(content)} content chunks, expected 1")
        check(r.data == ctx.image[off:off + ln], f"READ DF off={off} len={ln}: wrong data")
    ctx.sanity(c, "READ with DF")
    c.disc()


# ------------------------------------------------------- transmission errors
@case("any")
def wrong_request_magic_closes_connection(ctx):
    c = ctx.conn()
    c.send_req(CMD_READ, 0, 4096, magic=0x25609514)
    c.expect_eof("request magic 0x25609514")


@case("any")
def unknown_commands_reply_einval(ctx):
    c = ctx.conn()
    for cmd in (CMD_RESIZE, 9, 42, 0x7FFF, 0xFFFF):
        c.expect_errno(EINVAL, cmd, 0, 0, what=f"unknown command {cmd}")
        ctx.sanity(c, f"unknown command {cmd}")
    c.disc()


@case("any")
def unknown_command_flags_reply_einval(ctx):
    c = ctx.conn()
    c.expect_errno(EINVAL, CMD_READ, 0, 4096, flags=0x80, what="READ flag 0x80")
    ctx.sanity(c, "READ with flag 0x80")
    c.expect_errno(EINVAL, CMD_FLUSH, 0, 0, flags=0x4000, what="FLUSH flag 0x4000")
    c.expect_errno(EINVAL, CMD_CACHE, 0, 4096, flags=0x100, what="CACHE flag 0x100")
    ctx.sanity(c, "FLUSH/CACHE with unknown flags")
    if ctx.mode == "rw":
        c.expect_errno(EINVAL, CMD_WRITE, 0, 4096, flags=0x80, payload=b"\xee" * 4096,
                       what="WRITE flag 0x80")
        ctx.sanity(c, "WRITE with flag 0x80 (payload consumed?)")
        c.expect_errno(EINVAL, CMD_TRIM, 0, 4096, flags=0x8000, what="TRIM flag 0x8000")
        c.expect_errno(EINVAL, CMD_WRITE_ZEROES, 0, 4096, flags=0x40, what="WRITE_ZEROES flag 0x40")
        ctx.sanity(c, "TRIM/WRITE_ZEROES with unknown flags")
    c.disc()


@case("any")
def reads_past_the_end_reply_einval(ctx):
    c = ctx.conn()
    n = ctx.size
    for off, ln in ((n - 512, 1024), (n, 512), (n + 4096, 4096), (1 << 62, 4096),
                    ((1 << 64) - 512, 1024), ((1 << 64) - 4096, 4096)):
        c.expect_errno(EINVAL, CMD_READ, off, ln, what=f"READ off={off} len={ln}")
        c.expect_errno(EINVAL, CMD_CACHE, off, ln, what=f"CACHE off={off} len={ln}")
    ctx.sanity(c, "reads past the end")
    check(c.read(n - 512, 512) == ctx.image[n - 512:], "READ of the last sector")
    c.disc()


@case("rw")
def writes_past_the_end_reply_enospc(ctx):
    c = ctx.conn()
    n = ctx.size
    for off, ln in ((n - 512, 1024), (n, 512), (n + 4096, 4096), (1 << 62, 4096)):
        c.expect_errno(ENOSPC, CMD_WRITE, off, ln, payload=b"\x5e" * ln, what=f"WRITE off={off} len={ln}")
        ctx.sanity(c, f"WRITE past the end off={off} (payload consumed?)")
        c.expect_errno(ENOSPC, CMD_TRIM, off, ln, what=f"TRIM off={off} len={ln}")
        c.expect_errno(ENOSPC, CMD_WRITE_ZEROES, off, ln, what=f"WRITE_ZEROES off={off} len={ln}")
        c.expect_errno(ENOSPC, CMD_WRITE_ZEROES, off, ln, flags=CMDF_NO_HOLE | CMDF_FUA,
                       what=f"WRITE_ZEROES NO_HOLE|FUA off={off} len={ln}")
    # offset + length wraps around 2^64
    c.expect_errno((ENOSPC, EINVAL), CMD_WRITE, (1 << 64) - 512, 1024, payload=b"\x5e" * 1024,
                   what="WRITE whose end wraps past 2^64")
    c.expect_errno((ENOSPC, EINVAL), CMD_WRITE_ZEROES, (1 << 64) - 512, 1024, what="WRITE_ZEROES wrapping")
    c.expect_errno((ENOSPC, EINVAL), CMD_TRIM, (1 << 64) - 512, 1024, what="TRIM wrapping")
    ctx.sanity(c, "writes past the end")
    c.disc()


@case("any")
def unaligned_requests_reply_einval(ctx):
    c = ctx.conn()
    for off, ln in ((100, 512), (0, 100), (512, 100), (511, 513), (4096 + 1, 4095)):
        c.expect_errno(EINVAL, CMD_READ, off, ln, what=f"READ off={off} len={ln}")
        c.expect_errno(EINVAL, CMD_CACHE, off, ln, what=f"CACHE off={off} len={ln}")
        if ctx.mode == "rw":
            c.expect_errno(EINVAL, CMD_WRITE, off, ln, payload=bytes([0xAB]) * ln,
                           what=f"WRITE off={off} len={ln}")
            ctx.sanity(c, f"unaligned WRITE off={off} len={ln} (payload consumed?)")
            c.expect_errno(EINVAL, CMD_TRIM, off, ln, what=f"TRIM off={off} len={ln}")
            c.expect_errno(EINVAL, CMD_WRITE_ZEROES, off, ln, what=f"WRITE_ZEROES off={off} len={ln}")
    ctx.sanity(c, "unaligned requests")
    c.disc()


@case("any")
def oversize_read_is_einval_without_structured_replies(ctx):
    c = ctx.conn()
    c.expect_errno(EINVAL, CMD_READ, 0, MAX_BLOCK + 512, what="simple READ of 32 MiB + 512")
    c.expect_errno(EINVAL, CMD_READ, 0, 0xFFFFFE00, what="simple READ of 4 GiB - 512")
    ctx.sanity(c, "oversize READ")
    check(c.read(0, MAX_BLOCK) == ctx.image[:MAX_BLOCK], "READ of exactly 32 MiB: wrong data")
    c.disc()


@case("rw")
def oversize_write_is_einval_and_its_payload_discarded(ctx):
    c = ctx.conn()
    c.expect_errno(EINVAL, CMD_WRITE, 0, MAX_BLOCK + 4096, payload=b"\xc3" * (MAX_BLOCK + 4096),
                   what="WRITE of 32 MiB + 4 KiB")
    ctx.sanity(c, "WRITE of 32 MiB + 4 KiB (payload discarded?)")
    # Exactly the maximum is fine.
    data = random.Random(7).randbytes(MAX_BLOCK)
    ctx.write_image(c, 16 * MIB, data)
    ctx.sanity(c, "WRITE of exactly 32 MiB")
    c.disc()


@case("rw")
def write_above_64mib_disconnects(ctx):
    c = ctx.conn()
    c.send_req(CMD_WRITE, 0, 64 * MIB + 4096)
    try:
        c.send(b"\xd4" * 65536)
    except OSError:
        pass
    # An error reply first is fine; the connection must then end.
    c.expect_eof("WRITE header with length 64 MiB + 4 KiB")


@case("any")
def zero_length_requests_do_not_break_the_connection(ctx):
    c = ctx.conn()
    cmds = [CMD_READ, CMD_CACHE] + ([CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES] if ctx.mode == "rw" else [])
    for cmd in cmds:
        c.cmd(cmd, 4096, 0)   # any errno: the protocol leaves length 0 open
        ctx.sanity(c, f"{CMD_NAMES[cmd]} of length 0")
    c.disc()


@case("ro")
def write_commands_on_read_only_export_reply_eperm(ctx):
    c = ctx.conn()
    check(c.flags & F_READ_ONLY, f"--read-only export flags {c.flags:#06x} lack READ_ONLY")
    for flags in (0, CMDF_FUA):
        c.expect_errno(EPERM, CMD_WRITE, 0, 4096, flags, payload=b"\x11" * 4096, what=f"WRITE flags={flags}")
        ctx.sanity(c, "WRITE on read-only (payload consumed?)")
        c.expect_errno(EPERM, CMD_TRIM, 0, 4096, flags, what=f"TRIM flags={flags}")
        c.expect_errno(EPERM, CMD_WRITE_ZEROES, 0, 4096, flags, what=f"WRITE_ZEROES flags={flags}")
        c.expect_errno(EPERM, CMD_WRITE_ZEROES, 0, 4096, flags | CMDF_NO_HOLE,
                       what=f"WRITE_ZEROES NO_HOLE flags={flags}")
    r = c.cmd(CMD_FLUSH, 0, 0)
    check(r.error == 0, f"FLUSH on a read-only export: {ename(r.error)}")
    r = c.cmd(CMD_CACHE, 0, MIB)
    check(r.error == 0, f"CACHE on a read-only export: {ename(r.error)}")
    ctx.sanity(c, "write commands on read-only")
    c.disc()


# ----------------------------------------------------------- normal commands
@case("rw")
def fua_write_flush_cache_trim_and_zeroes_work(ctx):
    c = ctx.conn()
    rng = random.Random(11)
    ctx.write_image(c, 2 * MIB, rng.randbytes(64 * 1024), CMDF_FUA)
    check(c.read(2 * MIB, 64 * 1024) == ctx.image[2 * MIB:2 * MIB + 65536], "FUA write read back")
    check(c.cmd(CMD_FLUSH, 0, 0).error == 0, "FLUSH failed")
    check(c.cmd(CMD_CACHE, 0, 4 * MIB).error == 0, "CACHE failed")
    r = c.cmd(CMD_WRITE_ZEROES, 3 * MIB, 128 * 1024, CMDF_NO_HOLE)
    check(r.error == 0, f"WRITE_ZEROES NO_HOLE: {ename(r.error)}")
    ctx.image[3 * MIB:3 * MIB + 131072] = bytes(131072)
    r = c.cmd(CMD_WRITE_ZEROES, 3 * MIB + 512 * 1024, 4096, CMDF_FUA)
    check(r.error == 0, f"WRITE_ZEROES FUA: {ename(r.error)}")
    ctx.image[3 * MIB + 524288:3 * MIB + 524288 + 4096] = bytes(4096)
    r = c.cmd(CMD_WRITE_ZEROES, 3 * MIB + 768 * 1024, 8192, CMDF_FAST_ZERO)
    check(r.error in (0, ENOTSUP), f"WRITE_ZEROES FAST_ZERO: {ename(r.error)}")
    if r.error == 0:
        ctx.image[3 * MIB + 786432:3 * MIB + 786432 + 8192] = bytes(8192)
    check(c.read(3 * MIB, MIB) == ctx.image[3 * MIB:4 * MIB], "WRITE_ZEROES read back")
    # TRIM then rewrite (trimmed contents are unspecified until rewritten).
    check(c.cmd(CMD_TRIM, 5 * MIB, MIB).error == 0, "TRIM failed")
    ctx.write_image(c, 5 * MIB, rng.randbytes(MIB))
    check(c.cmd(CMD_FLUSH, 0, 0).error == 0, "FLUSH failed")
    c.disc()


@case("rw")
def pipelined_requests_are_matched_by_handle(ctx):
    c = ctx.conn()
    rng = random.Random(5)
    handles = {}
    # Handles use all 64 bits; writes go to distinct 64 KiB slots in 8..12 MiB;
    # reads of 12..16 MiB (not written here) can complete in any order.
    writes = {}
    for i in range(48):
        h = rng.getrandbits(64)
        if i % 3 == 0:
            off = 12 * MIB + rng.randrange(0, 4 * MIB // 4096 - 16) * 4096
            ln = rng.choice((4096, 16384, 65536))
            c.send_req(CMD_READ, off, ln, handle=h)
            handles[h] = ("read", off, ln)
        else:
            off = 8 * MIB + i * 65536
            data = rng.randbytes(rng.choice((512, 4096, 65536)))
            c.send_req(CMD_WRITE, off, len(data), flags=CMDF_FUA if i % 5 == 0 else 0, payload=data, handle=h)
            handles[h] = ("write", off, len(data))
            writes[off] = data
    h = rng.getrandbits(64) | (1 << 63)
    c.send_req(CMD_FLUSH, 0, 0, handle=h)
    handles[h] = ("flush", 0, 0)
    seen = set()
    for _ in range(len(handles)):
        r = c.recv_reply()
        check(r.handle in handles, f"reply for handle {r.handle:#x} never sent")
        check(r.handle not in seen, f"two replies for handle {r.handle:#x}")
        seen.add(r.handle)
        kind, off, ln = handles[r.handle]
        check(r.error == 0, f"pipelined {kind} off={off} len={ln}: {ename(r.error)}")
        if kind == "read":
            check(r.data == ctx.image[off:off + ln], f"pipelined read off={off}: wrong data")
    for off, data in writes.items():
        ctx.image[off:off + len(data)] = data
    ctx.sanity(c, "pipelining")
    c.disc()


# -------------------------------------------------- misbehaving connections
@case("any")
def half_header_then_stall_does_not_block_others(ctx):
    stalled = ctx.conn()
    stalled.send(struct.pack(">IHHQ", REQUEST_MAGIC, 0, CMD_READ, 1)[:10])
    silent = ctx.connect()            # connected, never completes the handshake
    silent_greeted = ctx.connect()
    silent_greeted.greeting()         # greeting read, no client flags sent
    t0 = time.monotonic()
    for i in range(3):
        other = ctx.conn()
        ctx.sanity(other, "a connection while another sent half a header")
        if ctx.mode == "rw":
            data = random.Random(i).randbytes(8192)
            ctx.write_image(other, 20 * MIB + i * 8192, data)
        other.disc()
    check(time.monotonic() - t0 < 10, "other connections were slow while one stalled")
    ctx.verify_export("stalled connections (still open)")
    for c in (stalled, silent, silent_greeted):
        c.close()


@case("rw")
def disconnect_mid_write_payload_leaves_data_untouched(ctx):
    c = ctx.conn()
    c.send_req(CMD_WRITE, 24 * MIB, MIB)
    c.send(b"\x99" * (100 * 1024))
    c.close()
    # And an abortive close (RST) mid-payload.
    c = ctx.conn()
    c.send_req(CMD_WRITE, 25 * MIB, 4 * MIB)
    c.send(b"\x98" * (1 * MIB + 17))
    c.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
    time.sleep(0.3)


@case("any")
def disconnect_before_reading_replies_does_not_kill_server(ctx):
    # The server gets EPIPE/ECONNRESET writing 32 MiB replies nobody reads.
    for _ in range(3):
        c = ctx.conn()
        for i in range(4):
            c.send_req(CMD_READ, i * 4096, MAX_BLOCK // 2)
        c.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
    c = ctx.conn(structured=True)
    c.send_req(CMD_READ, 0, MAX_BLOCK)
    c.close()
    time.sleep(0.3)


@case("any")
def disconnect_in_the_middle_of_the_handshake(ctx):
    for cut in (0, 2, 4):
        c = ctx.connect()
        c.greeting()
        c.send(struct.pack(">I", FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES)[:cut] if cut else b"")
        c.close()
    c = ctx.connect()
    c.greeting()
    c.client_flags()
    c.send(struct.pack(">QII", IHAVEOPT, OPT_GO, 100) + b"\0\0\0")
    c.close()


@case("rw")
def disc_completes_in_flight_writes_then_closes(ctx):
    c = ctx.conn()
    data = random.Random(21).randbytes(256 * 1024)
    c.send_req(CMD_WRITE, 30 * MIB, len(data), payload=data)
    c.send_req(CMD_DISC, 0, 0)
    ctx.image[30 * MIB:30 * MIB + len(data)] = data
    c.s.settimeout(10)
    # The write's reply may arrive; then the server closes.
    try:
        r = c.recv_reply()
        check(r.cmd == CMD_WRITE and r.error == 0, f"reply after DISC: {CMD_NAMES.get(r.cmd)} {ename(r.error)}")
    except (Closed, ConnectionResetError):
        pass
    c.expect_eof("after NBD_CMD_DISC")


@case("any")
def many_concurrent_connections(ctx):
    conns = [ctx.conn() for _ in range(32)]
    for i, c in enumerate(conns):
        c.send_req(CMD_READ, i * 65536, 65536)
    for i, c in enumerate(conns):
        r = c.recv_reply()
        check(r.error == 0 and r.data == ctx.image[i * 65536:(i + 1) * 65536],
              f"connection {i} of 32: wrong reply")
    for c in conns:
        c.disc()


# ---------------------------------------------------------------- the runner
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--mode", choices=("rw", "ro"), required=True)
    ap.add_argument("--size", type=int, default=64 * MIB)
    ap.add_argument("-k", dest="only", default="")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    ctx = Ctx(args)

    if ctx.mode == "rw":
        # Known contents everywhere, so any stray write shows.
        ctx.image[:] = random.Random(1234).randbytes(ctx.size)
        c = ctx.conn()
        for off in range(0, ctx.size, 4 * MIB):
            c.write(off, bytes(ctx.image[off:off + 4 * MIB]))
        check(c.cmd(CMD_FLUSH, 0, 0).error == 0, "initial FLUSH failed")
        c.disc()
    ctx.verify_export("the initial fill")

    failures = []
    ran = 0
    for name, mode, fn in TESTS:
        if mode not in ("any", ctx.mode) or ctx.only not in name:
            continue
        ran += 1
        t0 = time.monotonic()
        try:
            fn(ctx)
            ctx.verify_export(name)
            print(f"ok   {name} ({time.monotonic() - t0:.1f}s)", flush=True)
        except Exception as e:   # Fail, Closed, OSError, or a reply too odd to parse
            failures.append(name)
            print(f"FAIL {name}: {'' if isinstance(e, Fail) else type(e).__name__ + ': '}{e}", flush=True)
            if ctx.verbose or not isinstance(e, (Fail, Closed, OSError)):
                traceback.print_exc()
            try:
                ctx.verify_export(name)
            except Exception as e2:
                print(f"     and {e2}", flush=True)
            try:
                ctx.resync()
            except Exception as e3:
                print(f"     the server no longer serves: {e3}", flush=True)
                break
    check(ran > 0, f"no case matches -k {ctx.only!r}")
    print(f"{ran - len(failures)}/{ran} cases passed ({ctx.mode})")
    if failures:
        print("failed: " + " ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Fail as e:
        print(f"FAIL setup: {e}")
        sys.exit(1)
