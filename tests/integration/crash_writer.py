#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""crash_writer.py — the writer and the verifier of the crash harness
(tests/integration/crash_lib.sh; 120-writeback-crash.sh, 121-writeback-powercut.sh).

Subcommands (each takes --blocks N [--first-block F]: the region, 4 KiB blocks):
  prefill URI --log LOG      write every block of the region once, then FLUSH
  write URI --log LOG        random 4..64 KiB writes (some FUA), a FLUSH every ~32,
                             read-backs, 16 in flight, until the connection dies
                             (exit 0) or --duration S is over (then FLUSH, exit 0)
  verify URI --log LOG --state STATE
                             read the region, check it against the log, exit 1
                             on any violation; STATE carries over between runs
  warm-read URI --log LOG --state STATE [-n 256]
                             4 KiB reads of blocks that were durable at the kill
                             (for the harness's cache-hit check); prints the count
  kill-on commit|checkpoint --pid PID --control SOCK
                             kill -9 PID when the daemon's next journal commit
                             (or checkpoint) is due, as its control socket shows
  selftest                   the verifier against doctored images and logs:
                             every violation kind must be reported, and every
                             legal crash outcome must pass

By hand, against any NBD server (a real crash test needs a server you can kill):
  U='nbd+unix:///?socket=/tmp/s.sock'
  crash_writer.py prefill "$U" --log /tmp/c.log --blocks 8192
  crash_writer.py write "$U" --log /tmp/c.log --blocks 8192 --seed 1 &   # then kill -9 the server
  (restart the server on the same devices)
  crash_writer.py verify "$U" --log /tmp/c.log --state /tmp/c.state --blocks 8192
Use /usr/bin/python3 (Debian's python3-libnbd provides the `nbd` module).

Block format. Every 4 KiB block a write carries describes itself:
  0  magic "UBCRASH\\x01"     16 write id (u64)      28 crc32 of bytes 0..27 and 32..4095
  8  block number (u64)      24 index in the write  32 4064 bytes of SHAKE-128(write id, block)
so no two blocks ever written are alike, a block in the wrong place or torn
(any 4 KiB mixing two writes) is seen, and the verifier regenerates the
expected bytes from the header. Little-endian. All zeros = never written.

Log format. One line per event, appended, each line written to the OS as it
happens (line buffering: the writer outlives the server it writes to):
  B SEQ TIME cycle-begin PID         the writer connected
  W SEQ TIME FIRST NBLOCKS FUA       write issued (its write id is SEQ)
  A SEQ TIME WID                     write WID acknowledged (status 0)
  E SEQ TIME WID ERRNO               write WID completed with an error
  F SEQ TIME                         FLUSH issued (its id is SEQ)
  D SEQ TIME FID                     FLUSH FID completed (status 0)
  X SEQ TIME FID ERRNO               FLUSH FID failed
  V SEQ TIME BLOCK WANT GOT          the writer's own read-back found a block wrong
  C SEQ TIME REASON                  the writer's cycle ended (the connection died)
SEQ is one counter over the whole log (a writer continues after the last line),
so event order is log order and write ids grow across cycles. SEQ of a W is
logged before the request is handed to libnbd, and of an A/D after the reply
was read, so the log errs on the safe side: a write may look acked later and
a FLUSH issued earlier than they were, never the other way round.

The rule the verifier checks, per block b. NBD semantics: a FLUSH's reply
means every write the server had acknowledged before it received the FLUSH
is on stable storage; a FUA write is on stable storage when acknowledged.
  - W is durable iff W was acknowledged and either W had FUA or a FLUSH
    that completed was issued after W's acknowledgement (seq A < seq F).
  - W ends at its reply (ack or error) or, with no reply, at the end of its
    cycle: the server died, W may or may not have landed, but nothing of it
    lands after that.
  - If W ended before a durable write D to b was issued, b holds D or
    something later, never W: so b may hold W iff end(W) >= T(b), where
    T(b) is the issue seq of b's latest-issued durable write. The initial
    content (zeros; the prefill is an ordinary durable write) ends before
    everything: it is allowed only while b has no durable write.
  - b never holds anything else: not a write to another block, not an id
    that was never written to b, not a torn or garbled 4 KiB (crc, bytes).
    With --sector S < 4096 (devices whose atomic unit is S bytes, e.g. the
    fault layer's drop_unflushed over a 512-byte-sector file: a power cut
    in the middle of its flush leaves some sectors of a write written), b
    may be a mix, S bytes at a time, of the writes it may hold.
  - Reads are stable (on by default, --no-narrow turns it off): once a
    verify saw b holding X after a restart, X is b's content from then on,
    as durable as a durable write — a later crash with no new durable write
    to b must show X or a write issued after that verify, never the older
    write a crash lost and a replay brought back (DESIGN.md §5: neither
    writeback nor a replay may resurrect an overwritten copy).
In words: b holds its latest durable write D, or a write to b still in
flight when D was issued, or one issued after D — acked or not, each of
those may or may not have landed. The writer never has two requests on one
block in flight, so per block the writes are totally ordered and the rule
reads: b holds D or a write to b issued after D was acknowledged.
"""

import argparse
import contextlib
import errno
import hashlib
import io
import json
import os
import random
import struct
import sys
import time
import zlib

BLOCK = 4096
MAGIC = b"UBCRASH\x01"
HDR = struct.Struct("<8sQQII")  # magic, block, write id, index in write, crc32
FILL = BLOCK - HDR.size
ZERO_BLOCK = bytes(BLOCK)
INIT = 0  # the "write id" of the initial all-zero content
# Replies a dying connection gives the commands still in flight: not the
# server's answer about the data.
DISCONNECT_ERRNOS = {errno.ENOTCONN, errno.ESHUTDOWN, errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}


# ---- the block pattern ----

def fill_bytes(wid, blk):
    return hashlib.shake_128(struct.pack("<8sQQ", b"ubcrash1", wid, blk)).digest(FILL)


def make_block(wid, blk, index):
    fill = fill_bytes(wid, blk)
    head = HDR.pack(MAGIC, blk, wid, index, 0)[:28]
    crc = zlib.crc32(fill, zlib.crc32(head))
    return head + struct.pack("<I", crc) + fill


def make_write(wid, first, nblocks):
    return b"".join(make_block(wid, first + i, i) for i in range(nblocks))


def decode_block(data, blk):
    """(write id, None) for a well-formed block written to `blk`, or (None, why).
    All zeros is write id INIT."""
    if data == ZERO_BLOCK:
        return INIT, None
    magic, hblk, wid, _index, crc = HDR.unpack_from(data)
    if magic != MAGIC:
        return None, "not a block any write wrote (bad magic)"
    if zlib.crc32(data[HDR.size:], zlib.crc32(data[:28])) != crc:
        return None, f"torn or corrupt (crc mismatch; header says write {wid} block {hblk})"
    if hblk != blk:
        return None, f"holds block {hblk}'s data (write {wid})"
    if wid == INIT or data[HDR.size:] != fill_bytes(wid, blk):
        return None, f"header of write {wid} with bytes that write never wrote"
    return wid, None


# ---- the log ----

class Log:
    """Appends events; every line reaches the OS when it is written."""

    def __init__(self, path):
        self.seq = last_seq(path)
        self.f = open(path, "a", buffering=1)

    def event(self, kind, *fields):
        self.seq += 1
        self.f.write(" ".join([kind, str(self.seq), f"{time.time():.6f}"] + [str(x) for x in fields]) + "\n")
        return self.seq

    def close(self):
        self.f.close()


def last_seq(path):
    """The SEQ of the log's last complete line (0 for a new log)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            tail = f.read()
    except FileNotFoundError:
        return 0
    lines = tail.split(b"\n")
    for line in reversed(lines[:-1]):  # lines[-1] is after the last newline
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            return int(parts[1])
    return 0


class Write:
    __slots__ = ("wid", "first", "n", "fua", "ack", "end", "durable")

    def __init__(self, wid, first, n, fua):
        self.wid, self.first, self.n, self.fua = wid, first, n, fua
        self.ack = None  # seq of the A line
        self.end = None  # seq of the A/E line, or of the cycle's end
        self.durable = False


def read_cycles(path, offset, acked_durable=False):
    """The cycles in the log from byte `offset` on: a list of lists of Write,
    with end and durability worked out, plus the new offset. Only complete
    lines are read; the log must not be growing (every writer has exited)."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    cut = data.rfind(b"\n") + 1
    data = data[:cut]
    cycles = []
    writes = None
    done_flush_max = 0  # largest issue seq of a completed FLUSH in this cycle
    last = 0
    online_errors = []

    def close(end_seq):
        nonlocal writes
        if writes is None:
            return
        for w in writes.values():
            if w.end is None:
                w.end = end_seq
            w.durable = w.ack is not None and (acked_durable or w.fua or w.ack < done_flush_max)
        cycles.append(list(writes.values()))
        writes = None

    for line in data.decode().splitlines():
        p = line.split()
        if not p:
            continue
        kind, seq = p[0], int(p[1])
        if seq <= last:
            raise SystemExit(f"{path}: seq {seq} after {last}: not one log")
        last = seq
        if kind == "B":
            close(seq)
            writes, done_flush_max = {}, 0
            continue
        if writes is None:
            raise SystemExit(f"{path}: '{line}' outside a cycle (no B line before it)")
        if kind == "W":
            writes[seq] = Write(seq, int(p[3]), int(p[4]), p[5] == "1")
        elif kind == "A":
            w = writes[int(p[3])]
            w.ack = w.end = seq
        elif kind == "E":
            writes[int(p[3])].end = seq
        elif kind == "D":
            done_flush_max = max(done_flush_max, int(p[3]))
        elif kind == "C":
            close(seq)
        elif kind == "V":
            online_errors.append(line)
        elif kind not in ("F", "X"):
            raise SystemExit(f"{path}: unknown event '{line}'")
    close(last + 1)
    return cycles, offset + cut, online_errors


# ---- what each block may hold ----

class Model:
    """Per block: the write ids it may hold, and its latest durable write."""

    def __init__(self, first, nblocks):
        self.first, self.n = first, nblocks
        self.allowed = [[INIT] for _ in range(nblocks)]
        self.durable = [None] * nblocks  # latest durable write id
        # Per block touched since the last verify: its latest acknowledged
        # write (not saved: only for the report of lost unflushed writes).
        self.recent_acked = {}
        # First block of every write an allowed list names: a block's
        # expected bytes carry its index in the write.
        self.firsts = {}
        self.log_offset = 0
        self.verifies = 0

    @classmethod
    def load(cls, path, first, nblocks):
        m = cls(first, nblocks)
        if path and os.path.exists(path):
            with open(path) as f:
                s = json.load(f)
            if (s["first_block"], s["blocks"]) != (first, nblocks):
                raise SystemExit(f"{path}: state is for blocks {s['first_block']}+{s['blocks']}, "
                                 f"not {first}+{nblocks}")
            m.allowed, m.durable = s["allowed"], s["durable"]
            m.firsts = {int(k): v for k, v in s["firsts"].items()}
            m.log_offset, m.verifies = s["log_offset"], s["verifies"]
        return m

    def save(self, path):
        live = {w for ids in self.allowed for w in ids}
        self.firsts = {w: f for w, f in self.firsts.items() if w in live}
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"first_block": self.first, "blocks": self.n, "log_offset": self.log_offset,
                       "verifies": self.verifies, "allowed": self.allowed, "durable": self.durable,
                       "firsts": self.firsts}, f)
        os.replace(tmp, path)

    def apply(self, cycle):
        """Folds one finished cycle in."""
        per_block = {}
        for w in cycle:
            self.firsts[w.wid] = w.first
            for b in range(w.first, w.first + w.n):
                i = b - self.first
                if not 0 <= i < self.n:
                    raise SystemExit(f"write {w.wid} touches block {b}, outside the region")
                per_block.setdefault(i, []).append(w)
        for i, ws in per_block.items():
            acked = [w.wid for w in ws if w.ack is not None]
            if acked:
                self.recent_acked[i] = max(acked)
            durable = [w for w in ws if w.durable]
            if durable:
                last = max(durable, key=lambda w: w.wid)  # the largest issue seq
                # Everything before this cycle ended before `last` was issued.
                self.allowed[i] = [w.wid for w in ws if w.end >= last.wid]
                self.durable[i] = last.wid
            else:
                self.allowed[i] = self.allowed[i] + [w.wid for w in ws]


def region_reader(h, first, nblocks):
    """Reads the region with large requests; yields (block index, bytes)."""
    import nbd
    chunk = 4 << 20
    try:
        mx = h.get_block_size(nbd.SIZE_MAXIMUM)
        if mx:
            chunk = min(chunk, mx // BLOCK * BLOCK)
    except nbd.Error:
        pass
    off, end = first * BLOCK, (first + nblocks) * BLOCK
    while off < end:
        n = min(chunk, end - off)
        data = h.pread(n, off)
        for j in range(n // BLOCK):
            yield (off - first * BLOCK) // BLOCK + j, data[j * BLOCK:(j + 1) * BLOCK]
        off += n


def sector_mix(data, b, allowed, firsts, sector):
    """The allowed write ids that, sector by sector, make up `data`, or None
    when some sector matches none of them. firsts: write id -> first block."""
    expect = {}
    for wid in allowed:
        if wid == INIT:
            expect[wid] = ZERO_BLOCK
        elif wid in firsts:
            expect[wid] = make_block(wid, b, b - firsts[wid])
    used = set()
    for off in range(0, BLOCK, sector):
        piece = data[off:off + sector]
        hit = next((w for w, e in expect.items() if e[off:off + sector] == piece), None)
        if hit is None:
            return None
        used.add(hit)
    return used


def check_region(model, blocks, wrote_to, max_list=10, sector=BLOCK):
    """blocks: iterable of (index, bytes). wrote_to: returns {write id ->
    (first, n)} for every write in the log (to tell "never written here"
    from "stale"; called at the first violation only). sector < 4096: the
    devices' atomic unit is smaller than a block, so a block may be a
    sector-by-sector mix of the writes it may hold. Returns (report dict,
    violations list, observed ids)."""
    r = dict(checked=0, durable_blocks=0, holding_durable=0, holding_later=0, holding_initial=0,
             lost_acked=0, mixed=0, violations=0)
    violations = []
    observed = [None] * model.n
    writes = None
    for i, data in blocks:
        b = model.first + i
        r["checked"] += 1
        wid, why = decode_block(data, b)
        allowed = model.allowed[i]
        d = model.durable[i]
        if d is not None:
            r["durable_blocks"] += 1
        if why is None:
            observed[i] = wid
            if wid in allowed:
                if wid < model.recent_acked.get(i, INIT):
                    r["lost_acked"] += 1  # allowed: it was never durable
                if wid == INIT:
                    r["holding_initial"] += 1
                elif wid == d:
                    r["holding_durable"] += 1
                else:
                    r["holding_later"] += 1
                continue
            if writes is None:
                writes = wrote_to()
            if wid == INIT:
                why = f"reads zeros, but write {d} to it was durable"
            elif wid not in writes or not writes[wid][0] <= b < writes[wid][0] + writes[wid][1]:
                why = f"holds write {wid}, which never wrote this block"
            else:
                why = (f"holds write {wid}, stale: may hold only {shorten(allowed)}"
                       f" (latest durable write {d})")
        elif sector < BLOCK:
            mix = sector_mix(data, b, allowed, model.firsts, sector)
            if mix is not None:
                # Legal only because the devices may tear at `sector`; the
                # block stays free to hold any of its allowed writes.
                r["mixed"] += 1
                continue
            why += f"; nor a mix of {shorten(allowed)} in {sector}-byte sectors"
        r["violations"] += 1
        if len(violations) < max_list:
            violations.append(f"block {b} (offset {b * BLOCK}): {why}")
    return r, violations, observed


def shorten(ids, n=6):
    s = [("initial" if x == INIT else str(x)) for x in ids]
    return ", ".join(s if len(s) <= n else s[:n] + [f"... ({len(s)} in all)"])


def load_model(args):
    model = Model.load(args.state, args.first_block, args.blocks)
    cycles, new_offset, online = read_cycles(args.log, model.log_offset,
                                             getattr(args, "acked_durable", False))
    return model, cycles, new_offset, online


def all_writes(path):
    """Every write id in the whole log -> (first, n)."""
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("W "):
                p = line.split()
                out[int(p[1])] = (int(p[3]), int(p[4]))
    return out


def run_verify(model, cycles, new_offset, online, read_blocks, wrote_to, narrow=True, max_list=10,
               out=sys.stdout, sector=BLOCK):
    for c in cycles:
        model.apply(c)
    model.log_offset = new_offset
    r, violations, observed = check_region(model, read_blocks, wrote_to, max_list, sector)
    if narrow:
        for i, wid in enumerate(observed):
            if wid is not None:
                model.allowed[i] = [wid]
    model.verifies += 1
    nw = sum(len(c) for c in cycles)
    print(f"verify: {len(cycles)} new cycle(s), {nw} writes; {r['checked']} blocks checked, "
          f"{r['durable_blocks']} with a durable write: {r['holding_durable']} hold it, "
          f"{r['holding_later']} a write issued later, {r['holding_initial']} the initial zeros; "
          f"{r['lost_acked']} lost their last acked write (never durable: allowed); "
          + (f"{r['mixed']} a mix of those in {sector}-byte sectors; " if sector < BLOCK else "") +
          f"{r['violations']} violation(s)", file=out)
    for v in violations:
        print(f"  VIOLATION {v}", file=out)
    if r["violations"] > len(violations):
        print(f"  ... and {r['violations'] - len(violations)} more", file=out)
    for line in online:
        print(f"  WRITER READ-BACK MISMATCH: {line}", file=out)
    return r, r["violations"] + len(online)


# ---- subcommands ----

def connect(uri):
    import nbd
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def cmd_verify(args):
    model, cycles, new_offset, online = load_model(args)
    h = connect(args.uri)
    if h.get_size() < (args.first_block + args.blocks) * BLOCK:
        raise SystemExit(f"export is {h.get_size()} bytes, the region needs "
                         f"{(args.first_block + args.blocks) * BLOCK}")
    t0 = time.monotonic()
    r, bad = run_verify(model, cycles, new_offset, online, region_reader(h, args.first_block, args.blocks),
                        lambda: all_writes(args.log), narrow=not args.no_narrow, max_list=args.max_list,
                        sector=args.sector)
    h.shutdown()
    print(f"verify: read {args.blocks * BLOCK >> 20} MiB in {time.monotonic() - t0:.2f} s")
    model.save(args.state)
    return 1 if bad else 0


def cmd_warm_read(args):
    """Reads (4 KiB each, random order) up to n blocks whose last write of the
    last cycle was durable: a cache that recovers warm has every one of them."""
    model, cycles, _, _ = load_model(args)
    if not cycles:
        print(0)
        return 0
    last_write = {}
    for w in cycles[-1]:
        for b in range(w.first, w.first + w.n):
            if b not in last_write or w.wid > last_write[b].wid:
                last_write[b] = w
    cand = sorted(b for b, w in last_write.items() if w.durable)
    rng = random.Random(args.seed)
    rng.shuffle(cand)
    cand = cand[:args.n]
    h = connect(args.uri)
    for b in cand:
        h.pread(BLOCK, b * BLOCK)
    h.shutdown()
    print(len(cand))
    return 0


def cmd_prefill(args):
    """Every block written once (1 MiB writes), then a FLUSH: the initial
    content is then durable, self-describing data rather than zeros."""
    h = connect(args.uri)
    log = Log(args.log)
    log.event("B", "prefill", os.getpid())
    step = 256
    for first in range(args.first_block, args.first_block + args.blocks, step):
        n = min(step, args.first_block + args.blocks - first)
        wid = log.event("W", first, n, 0)
        h.pwrite(make_write(wid, first, n), first * BLOCK)
        log.event("A", wid)
    fid = log.event("F")
    h.flush()
    log.event("D", fid)
    log.event("C", "prefill-done")
    log.close()
    h.shutdown()
    return 0


class Writer:
    """Random writes, FLUSHes and read-backs on one connection, many in
    flight; no two requests in flight touch the same block (so the order of
    the writes to a block is the order they were issued in)."""

    SIZES = [1, 1, 1, 1, 2, 2, 4, 4, 8, 16]  # blocks: 4 KiB..64 KiB, mostly small

    def __init__(self, args):
        import nbd
        self.nbd = nbd
        self.a = args
        self.rng = random.Random(args.seed)
        self.busy = set()
        self.done = []  # completions: (kind, id, errno), filled by callbacks
        self.inflight = {}  # id -> (kind, first, n, buffer)
        self.latest = {}  # block -> write id of its latest acked write this cycle (None: unknown)
        # What each block may hold as the cycle starts (the last verify's
        # state): a block not yet written in this cycle must read as one of them.
        self.model = None
        if args.state and os.path.exists(args.state):
            m = Model.load(args.state, args.first_block, args.blocks)
            if m.log_offset == os.path.getsize(args.log):
                self.model = m
            else:  # cycles since the last verify: the state is not the blocks' now
                print(f"crash_writer: {args.state} is older than {args.log}; not used", file=sys.stderr)
        self.flush_inflight = False
        self.until_flush = self.next_flush_gap()
        self.stats = dict(writes=0, acked=0, fua=0, flushes=0, flushes_done=0, reads=0, checked=0, bad=0,
                          errors=0)

    def next_flush_gap(self):
        return self.rng.randint(1, 2 * self.a.flush_every)

    def callback(self, kind, ident):
        def cb(err):
            self.done.append((kind, ident, err.value))
            return 1
        return cb

    def pick(self, max_n):
        for _ in range(8):
            n = min(self.rng.choice(self.SIZES), max_n, self.a.blocks)
            first = self.a.first_block + self.rng.randrange(self.a.blocks - n + 1)
            if not any(b in self.busy for b in range(first, first + n)):
                return first, n
        return None

    def issue_write(self, h, log):
        got = self.pick(self.a.max_blocks)
        if got is None:
            return False
        first, n = got
        fua = self.rng.random() < self.a.fua_pct / 100
        wid = log.event("W", first, n, int(fua))
        buf = self.nbd.Buffer.from_bytearray(bytearray(make_write(wid, first, n)))
        self.busy.update(range(first, first + n))
        self.inflight[wid] = ("W", first, n, buf)
        self.stats["writes"] += 1
        self.stats["fua"] += fua
        h.aio_pwrite(buf, first * BLOCK, completion=self.callback("W", wid),
                     flags=self.nbd.CMD_FLAG_FUA if fua else 0)
        return True

    def issue_read(self, h):
        got = self.pick(16)
        if got is None:
            return False
        first, n = got
        buf = self.nbd.Buffer(n * BLOCK)
        rid = ("R", first)
        self.busy.update(range(first, first + n))
        self.inflight[rid] = ("R", first, n, buf)
        self.stats["reads"] += 1
        h.aio_pread(buf, first * BLOCK, completion=self.callback("R", rid))
        return True

    def complete(self, log):
        done, self.done = self.done, []
        for kind, ident, err in done:
            if kind == "F":
                self.flush_inflight = False
                if err == 0:
                    log.event("D", ident)
                    self.stats["flushes_done"] += 1
                else:
                    log.event("X", ident, err)
                continue
            _, first, n, buf = self.inflight.pop(ident)
            self.busy.difference_update(range(first, first + n))
            if kind == "W":
                if err == 0:
                    log.event("A", ident)
                    self.stats["acked"] += 1
                    for b in range(first, first + n):
                        self.latest[b] = ident
                else:
                    log.event("E", ident, err)
                    if err not in DISCONNECT_ERRNOS:
                        self.stats["errors"] += 1
                    for b in range(first, first + n):
                        self.latest[b] = None  # partly landed, or not at all
            elif err == 0:
                self.check_read(log, first, n, buf.to_bytearray())

    def check_read(self, log, first, n, data):
        """No write to these blocks was in flight during the read: each must
        hold its latest write acked in this cycle; a block not written in
        this cycle, what the last verify left it (with --state; else any
        well-formed block of its own, or zeros)."""
        for j in range(n):
            b = first + j
            block = bytes(data[j * BLOCK:(j + 1) * BLOCK])
            wid, why = decode_block(block, b)
            self.stats["checked"] += 1
            if b in self.latest:
                want = self.latest[b]
                if want is None or (why is None and wid == want):
                    continue  # None: its last write failed, it may hold anything it was
            elif self.model:
                want = self.model.allowed[b - self.a.first_block]
                if why is None and wid in want:
                    continue
                if self.a.sector < BLOCK and sector_mix(block, b, want, self.model.firsts, self.a.sector):
                    continue
                want = shorten(want)
            else:
                want = "any"
                if why is None or self.a.sector < BLOCK:
                    continue
            self.stats["bad"] += 1
            got = why or wid
            log.event("V", b, str(want).replace(" ", ""), str(got).replace(" ", "_"))
            print(f"crash_writer: read-back of block {b}: want write {want}, got {got}", file=sys.stderr)

    def run(self, uri):
        h = connect(uri)
        log = Log(self.a.log)
        log.event("B", "cycle-begin", os.getpid())
        if self.a.ready:
            open(self.a.ready, "w").close()
        reason = "connection died"
        t_end = time.monotonic() + self.a.duration if self.a.duration else None
        interval = 1.0 / self.a.rate if self.a.rate else 0
        next_at = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if t_end and now >= t_end:
                    reason = "duration"
                    break
                while len(self.inflight) < self.a.qd and now >= next_at:
                    if self.rng.random() < self.a.read_pct / 100:
                        ok = self.issue_read(h)
                    else:
                        ok = self.issue_write(h, log)
                        if ok:
                            self.until_flush -= 1
                    if not ok:
                        break
                    next_at = max(next_at + interval, now - 1) if interval else now
                if self.until_flush <= 0 and not self.flush_inflight:
                    fid = log.event("F")
                    self.flush_inflight = True
                    self.stats["flushes"] += 1
                    self.until_flush = self.next_flush_gap()
                    h.aio_flush(completion=self.callback("F", fid))
                wait = -1
                if interval and len(self.inflight) < self.a.qd:
                    wait = max(0, int((next_at - time.monotonic()) * 1000))
                if not self.inflight and not self.flush_inflight:
                    wait = max(wait, 1)
                h.poll(wait)
                self.complete(log)
                if h.aio_is_dead() or h.aio_is_closed():
                    break
            if reason == "duration":
                while self.inflight or self.flush_inflight:
                    h.poll(-1)
                    self.complete(log)
                fid = log.event("F")
                h.flush()
                log.event("D", fid)
        except self.nbd.Error as e:
            reason = f"connection died ({e})"
        self.complete(log)
        log.event("C", reason.replace(" ", "_").replace("\n", "_")[:120])
        log.close()
        s = self.stats
        print(f"crash_writer: {s['writes']} writes ({s['acked']} acked, {s['fua']} FUA), "
              f"{s['flushes']} flushes ({s['flushes_done']} done), {s['reads']} reads "
              f"({s['checked']} blocks checked, {s['bad']} wrong), {s['errors']} I/O errors; {reason}",
              file=sys.stderr)
        return 1 if s["bad"] or s["errors"] else 0


def cmd_write(args):
    return Writer(args).run(args.uri)


# ---- kill -9 timed to the daemon's journal ----

class Ctl:
    """One connection to the control socket (doc/control.md, protocol 1)."""

    def __init__(self, path):
        import socket
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.buf = b""

    def get(self, name):
        self.s.sendall(f"ubcache-ctl/1 get {name}\n".encode())
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                kind, n = self.buf[:nl].split()
                if len(self.buf) >= nl + 1 + int(n):
                    body = self.buf[nl + 1:nl + 1 + int(n)]
                    self.buf = self.buf[nl + 1 + int(n):]
                    if kind == b"ok":
                        return body.decode().strip()
                    if kind == b"error":
                        raise RuntimeError(body.decode().strip())
                    continue  # progress
            more = self.s.recv(65536)
            if not more:
                raise ConnectionError("control socket closed")
            self.buf += more


def process_state(pid):
    """R, S, D, Z (exited, not yet reaped), ... or None (no such process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def cmd_kill_on(args):
    """Polls internal/journal_bytes every --poll-ms. It grows when the
    housekeeping thread commits the journal and drops when a checkpoint
    trims it. Seen twice, the event's period predicts the next one; kill -9
    lands at that moment give or take --jitter-ms, i.e. inside the next
    commit (or checkpoint). No event seen within --timeout: kill anyway.
    Prints what it aimed at."""
    rng = random.Random(args.seed)
    ctl = Ctl(args.control)
    t_end = time.monotonic() + args.timeout
    seen = []
    last = None
    target = None
    while time.monotonic() < t_end:
        try:
            v = int(ctl.get("internal/journal_bytes"))
        except (OSError, RuntimeError, ValueError) as e:
            print(f"kill-on: {e}; killing now")
            break
        now = time.monotonic()
        if last is not None and ((args.event == "commit" and v > last) or (args.event == "checkpoint" and v < last)):
            seen.append(now)
            period = seen[-1] - seen[-2] if len(seen) >= 2 else args.period
            target = now + period + rng.uniform(-args.jitter_ms, args.jitter_ms) / 1000
        last = v
        if target is not None and now >= target - args.poll_ms / 1000:
            time.sleep(max(0, target - time.monotonic()))
            break
        time.sleep(args.poll_ms / 1000)
    if process_state(args.pid) in ("Z", "X", None):
        print(f"kill-on: pid {args.pid} had died by itself before the kill")
        return 3
    os.kill(args.pid, 9)
    if target is None:
        print(f"kill-on: no {args.event} seen in {args.timeout:.1f} s; killed at the timeout")
    else:
        print(f"kill-on: killed at a predicted {args.event} ({len(seen)} seen)")
    return 0


# ---- selftest: the verifier must see every kind of violation ----

class Sim:
    """A synthetic log and device: writes land in `disk` when the test says."""

    def __init__(self, path, nblocks):
        self.path, self.n = path, nblocks
        self.log = Log(path)
        self.disk = [ZERO_BLOCK] * nblocks
        self.log.event("B", "selftest", 0)

    def issue(self, first, n=1, fua=False):
        return self.log.event("W", first, n, int(fua))

    def ack(self, wid):
        self.log.event("A", wid)

    def land(self, wid, first, n=1):
        for i in range(n):
            self.disk[first + i] = make_block(wid, first + i, i)

    def write(self, first, n=1, fua=False, land=True, ack=True):
        wid = self.issue(first, n, fua)
        if land:
            self.land(wid, first, n)
        if ack:
            self.ack(wid)
        return wid

    def flush(self, complete=True):
        fid = self.log.event("F")
        if complete:
            self.log.event("D", fid)
        return fid

    def crash(self):
        self.log.event("C", "selftest-crash")

    def restart(self):
        self.log.event("B", "selftest", 0)


def selftest(_args):
    import tempfile
    failures = 0

    def case(name, build, want, narrow=True, passes=False, sector=BLOCK, acked_durable=False):
        """want: None (must pass) or a phrase the report must contain (with
        violations, unless `passes`)."""
        nonlocal failures
        with tempfile.TemporaryDirectory() as d:
            sim = Sim(os.path.join(d, "log"), 16)
            state = os.path.join(d, "state")
            build(sim, lambda: verify_now(sim, state, narrow, sector, acked_durable)[0])
            sim.log.close()
            got, report = verify_now(sim, state, narrow, sector, acked_durable)
            ok = got == 0 if want is None else (got == 0 if passes else got > 0) and want in report
            failures += not ok
            print(f"selftest: {'ok  ' if ok else 'FAIL'} {name}: {got} violation(s)")
            if not ok or os.environ.get("CRASH_SELFTEST_VERBOSE"):
                print(report, end="")

    def verify_now(sim, state, narrow, sector, acked_durable=False):
        if not sim.log.f.closed:
            sim.log.f.flush()
        model = Model.load(state, 0, sim.n)
        cycles, off, online = read_cycles(sim.path, model.log_offset, acked_durable)
        out = io.StringIO()
        _, bad = run_verify(model, cycles, off, online, enumerate(sim.disk), lambda: all_writes(sim.path),
                            narrow=narrow, out=out, sector=sector)
        model.save(state)
        return bad, out.getvalue()

    def flushed_then_lost_unflushed(s, _):
        s.write(0); s.flush()
        s.write(1, land=False)            # acked, never flushed, lost in the crash
        s.crash()
    case("a write acked after the last completed FLUSH may be lost", flushed_then_lost_unflushed, None)
    case("... and is counted as lost", flushed_then_lost_unflushed, "; 1 lost their last acked write", passes=True)
    case("--acked-durable (a crash of the server alone): losing it is a violation", flushed_then_lost_unflushed,
         "reads zeros, but write", acked_durable=True)

    def unacked_lost_acked_durable(s, _):
        s.write(0); s.flush()
        s.write(0, ack=False, land=False)  # in flight at the kill: may be lost, even so
        s.crash()
    case("--acked-durable: a write in flight at the kill may still be lost", unacked_lost_acked_durable, None,
         acked_durable=True)

    def durable_lost(s, _):
        s.write(0, land=False)        # acked before the FLUSH's issue, yet missing
        s.flush(); s.crash()
    case("a write acked before a completed FLUSH was issued must read back", durable_lost, "reads zeros, but write")

    def overwritten_by_stale(s, _):
        a = s.write(2); s.flush()
        s.write(2); s.flush()
        s.land(a, 2)                      # the older durable write reappears
        s.crash()
    case("an older write never replaces a later durable one", overwritten_by_stale, "stale")

    def flush_in_flight(s, _):
        s.write(0)
        fid = s.log.event("F")
        s.write(1, land=False)        # acked while the FLUSH ran: not covered
        s.log.event("D", fid); s.crash()
    case("a write acked while the FLUSH was in flight may be lost", flush_in_flight, None)

    def flush_not_done(s, _):
        s.write(0, land=False); s.flush(complete=False); s.crash()
    case("a FLUSH that never completed promises nothing", flush_not_done, None)

    def overwrite_lost(s, _):
        s.write(0); s.flush()
        s.write(0, land=False)            # the unflushed overwrite is lost: a shows
        s.crash()
    case("an unflushed overwrite may be lost, the durable write before it shows", overwrite_lost, None)

    def failed_flush(s, _):
        s.write(0, land=False)
        fid = s.log.event("F"); s.log.event("X", fid, errno.EIO); s.crash()
    case("a FLUSH that failed promises nothing", failed_flush, None)

    def fua_lost(s, _):
        s.write(3, fua=True, land=False); s.crash()
    case("an acknowledged FUA write must read back", fua_lost, "reads zeros")

    def unacked_landed(s, _):
        s.write(4); s.flush()
        s.write(4, n=2, ack=False)        # in flight at the crash, landed anyway
        s.crash()
    case("a write in flight at the crash may have landed", unacked_landed, None)

    def partial_multiblock(s, _):
        s.write(0, n=4); s.flush()
        w = s.issue(0, n=4); s.ack(w)
        s.disk[1] = make_block(w, 1, 1)   # two blocks of an unflushed write landed
        s.disk[3] = make_block(w, 3, 3)
        s.crash()
    case("some blocks of an unflushed multi-block write may land", partial_multiblock, None)

    def torn(s, _):
        a = s.write(5); s.flush()
        b = s.write(5, ack=False, land=False)
        s.disk[5] = make_block(b, 5, 0)[:2048] + make_block(a, 5, 0)[2048:]
        s.crash()
    case("a torn 4 KiB block is a violation", torn, "torn")

    def sector_torn(s, _):
        a = s.write(5, n=2); s.flush()
        b = s.write(5, n=2, ack=False, land=False)  # in flight; its flush to the media cut short
        s.disk[6] = make_block(b, 6, 1)[:1024] + make_block(a, 6, 1)[1024:]
        s.crash()
    case("with --sector 512, a block torn at 512 bytes between allowed writes passes", sector_torn,
         "1 a mix of those in 512-byte sectors", passes=True, sector=512)
    case("... and without it, it is torn", sector_torn, "torn")

    def sector_torn_stale(s, _):
        a = s.write(5); s.flush()
        b = s.write(5); s.flush()
        s.disk[5] = make_block(b, 5, 0)[:512] + make_block(a, 5, 0)[512:]  # the stale a in 7 sectors
        s.crash()
    case("with --sector 512, a mix with a stale write is still a violation", sector_torn_stale,
         "nor a mix", sector=512)

    def misplaced(s, _):
        s.write(6); s.flush()
        w = s.write(7); s.flush()
        s.disk[6] = make_block(w, 7, 0)   # block 7's data at block 6
        s.crash()
    case("another block's data is a violation", misplaced, "holds block 7's data")

    def never_written(s, _):
        s.write(8); s.flush()
        s.disk[8] = make_block(999999, 8, 0)
        s.crash()
    case("a well-formed block of a write that never happened is a violation", never_written, "never wrote this block")

    def forged_bytes(s, _):
        w = s.write(8); s.flush()
        blk = bytearray(make_block(w, 8, 0)); blk[100] ^= 1
        blk[28:32] = struct.pack("<I", zlib.crc32(bytes(blk[32:]), zlib.crc32(bytes(blk[:28]))))
        s.disk[8] = bytes(blk)            # crc right, bytes not the write's
        s.crash()
    case("bytes a write never wrote are a violation even with a valid crc", forged_bytes, "bytes that write never wrote")

    def zeros_after_durable(s, _):
        s.write(9); s.flush(); s.disk[9] = ZERO_BLOCK; s.crash()
    case("zeros where a durable write was is a violation", zeros_after_durable, "reads zeros")

    def garbage(s, _):
        s.disk[10] = os.urandom(BLOCK); s.crash()
    case("random bytes are a violation", garbage, "bad magic")

    def durable_lost_next_cycle(s, verify):
        s.write(11); s.flush(); s.crash()
        assert verify() == 0
        s.restart()
        s.disk[11] = ZERO_BLOCK           # lost in a later crash with no new write
        s.crash()
    case("a durable write of an earlier cycle must survive later crashes", durable_lost_next_cycle, "reads zeros")

    def resurrected(s, verify):
        s.write(12); s.flush()
        b = s.write(12, land=False)       # acked, lost by the crash
        s.crash()
        assert verify() == 0              # sees a
        s.restart(); s.crash()
        s.land(b, 12)                     # b comes back after a verify saw a
        return None
    case("a lost write that a verify did not see never comes back", resurrected, "stale")
    case("--no-narrow: the same reads as allowed (the log alone permits it)", resurrected, None, narrow=False)

    def carried_over(s, verify):
        s.write(13); s.flush(); s.crash()
        assert verify() == 0
        s.restart()
        s.write(13, land=False); s.crash()  # acked, unflushed, lost: fine
        assert verify() == 0
        s.restart()
        s.write(14); s.flush(); s.crash()
    case("cycles verified one by one carry their state", carried_over, None)

    def online(s, _):
        s.log.event("V", 3, 7, 5); s.crash()
    case("the writer's own read-back mismatch fails the verify", online, "READ-BACK MISMATCH")

    def writer_readback(name, block_of, want_bad, sector=BLOCK, torn=False):
        """The writer's own check of a block it has not written this cycle
        (torn: the verify before saw a 512-byte mix of a and b there)."""
        nonlocal failures
        with tempfile.TemporaryDirectory() as d:
            sim = Sim(os.path.join(d, "log"), 16)
            state = os.path.join(d, "state")
            a = sim.write(0); sim.flush()
            b = sim.write(0, land=False, ack=False)
            if torn:
                sim.disk[0] = make_block(b, 0, 0)[:512] + make_block(a, 0, 0)[512:]
            sim.crash(); sim.log.close()
            verify_now(sim, state, True, 512 if torn else BLOCK)  # block 0 holds a (or the mix)
            args = argparse.Namespace(seed=1, flush_every=32, state=state, log=sim.path, first_block=0,
                                      blocks=sim.n, sector=sector)
            wr = Writer(args)
            log = Log(sim.path)
            with contextlib.redirect_stderr(io.StringIO()):
                wr.check_read(log, 0, 1, block_of(a, b))
            log.close()
            ok = wr.stats["bad"] == want_bad
            failures += not ok
            print(f"selftest: {'ok  ' if ok else 'FAIL'} {name}: {wr.stats['bad']} wrong")

    writer_readback("writer: a block not written this cycle reads as the last verify left it",
                    lambda a, b: make_block(a, 0, 0), 0)
    writer_readback("writer: ... and a write the verify did not see there is wrong",
                    lambda a, b: make_block(b, 0, 0), 1)
    mix = lambda a, b: make_block(b, 0, 0)[:512] + make_block(a, 0, 0)[512:]  # noqa: E731
    writer_readback("writer: with --sector 512, the mix the verify saw reads back fine", mix, 0,
                    sector=512, torn=True)
    writer_readback("writer: ... and without --sector it is torn", mix, 1, torn=True)

    print(f"selftest: {'all ok' if failures == 0 else f'{failures} case(s) FAILED'}")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def region(sp, uri=True):
        if uri:
            sp.add_argument("uri")
        sp.add_argument("--log", required=True)
        sp.add_argument("--blocks", type=int, required=True, help="region size in 4 KiB blocks")
        sp.add_argument("--first-block", type=int, default=0)

    sp = sub.add_parser("prefill"); region(sp)
    sp = sub.add_parser("write"); region(sp)
    sp.add_argument("--seed", type=int, default=1)
    sp.add_argument("--qd", type=int, default=16, help="requests in flight")
    sp.add_argument("--flush-every", type=int, default=32, help="mean writes between FLUSHes")
    sp.add_argument("--fua-pct", type=float, default=10)
    sp.add_argument("--read-pct", type=float, default=20, help="share of requests that read back")
    sp.add_argument("--max-blocks", type=int, default=16)
    sp.add_argument("--rate", type=float, default=0, help="max requests/s (0: no limit)")
    sp.add_argument("--duration", type=float, default=0, help="stop after S seconds, flush, exit (0: run until the connection dies)")
    sp.add_argument("--ready", help="create this file once connected")
    sp.add_argument("--state", help="the verifier's state: what blocks not written yet must read as")
    sp.add_argument("--sector", type=int, default=BLOCK, choices=[512, 1024, 2048, BLOCK],
                    help="as for verify")
    sp = sub.add_parser("verify"); region(sp)
    sp.add_argument("--state", required=True)
    sp.add_argument("--no-narrow", action="store_true", help="do not treat what a verify read as durable")
    sp.add_argument("--acked-durable", action="store_true",
                    help="every acknowledged write is durable, flushed or not: the rule for a crash of "
                         "the server process alone (kill -9 with the devices intact), where no disk "
                         "loses what it acknowledged")
    sp.add_argument("--sector", type=int, default=BLOCK, choices=[512, 1024, 2048, BLOCK],
                    help="the devices' atomic write unit: below 4096, a block may mix its allowed "
                         "writes sector by sector (a power cut of a 512-byte-sector device)")
    sp.add_argument("--max-list", type=int, default=10)
    sp = sub.add_parser("warm-read"); region(sp)
    sp.add_argument("--state", required=True)
    sp.add_argument("-n", type=int, default=256)
    sp.add_argument("--seed", type=int, default=1)
    sp = sub.add_parser("kill-on", help="kill -9 PID at the next journal commit or checkpoint")
    sp.add_argument("event", choices=["commit", "checkpoint"])
    sp.add_argument("--pid", type=int, required=True)
    sp.add_argument("--control", required=True)
    sp.add_argument("--timeout", type=float, default=3)
    sp.add_argument("--period", type=float, default=1.0, help="assumed period after the first event seen, s")
    sp.add_argument("--poll-ms", type=float, default=2)
    sp.add_argument("--jitter-ms", type=float, default=4)
    sp.add_argument("--seed", type=int, default=1)
    sub.add_parser("selftest")
    args = p.parse_args()
    fn = {"prefill": cmd_prefill, "write": cmd_write, "verify": cmd_verify, "warm-read": cmd_warm_read,
          "kill-on": cmd_kill_on, "selftest": selftest}[args.cmd]
    sys.exit(fn(args))


if __name__ == "__main__":
    main()
