#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""epoch_check — is a backing image a state a power cut could have left?

The rule of ordered writeback (issue 30): a client's writes fall into epochs
delimited by its barriers — a FLUSH, or a FUA write, which closes the epoch
it belongs to. After the cache is lost, the backing device alone must hold,
for some epoch E, in every block either its last version from epochs < E or
one of its versions from epoch E (a block with no version before E: its
initial content). This file decides that for one history and one image,
reports the largest such E, or the blocks that no E can satisfy.

Usage:
  epoch_check.py check --log HISTORY --image FILE [--offset BYTES] --blocks N
  epoch_check.py selftest           # hand-made histories that must pass / fail
  (exit 0: consistent; 1: a violation; 2: a history this checker cannot judge)

THE HISTORY (one event a line, in the order the client saw them; the writer
logs an issue before it sends the request and a reply after it arrived, so
the log order never inverts the real order):
  W WRITER SEQ BLOCK FUA EPOCH   a 4 KiB write issued (FUA 0/1; EPOCH: the
                                 writer's count of completed barriers, only
                                 informative)
  A WRITER SEQ                   that write acknowledged
  F FID / D FID                  FLUSH FID issued / completed
  anything else of a request (an error, no reply before the crash): never
  completed.
Every block of a write is a stamped block (make_block): its header names
writer, sequence, block and the writer's epoch, its body follows from the
header, so a block's content names exactly one write, or is the initial
content (zeros), or is wrong (torn, misplaced, never written: a violation
whatever E).

WHAT COUNTS (the exact rule). The daemon sees the requests in some order
consistent with the client's: a request issued after another was
acknowledged comes after it. A write's epoch is the number of barriers the
daemon saw before it; the client knows it only within bounds:
  - barrier j (1-based, in issue order) completed before write w was issued:
    w is after it, epoch(w) >= j;
  - barrier j issued after w was acknowledged: w is before it,
    epoch(w) <= j - 1;
  - a write in flight while a barrier was (issued before the barrier
    completed, acknowledged after it was issued) may be on either side;
  - a FUA write that is barrier j is the last write of epoch j - 1;
  - w1 acknowledged before w2 was issued: epoch(w1) <= epoch(w2);
  - a write never acknowledged (in flight at the kill) may be in any epoch
    its bounds allow, or may never have reached the daemon at all
    (epoch "absent": never on the backing device); an acknowledged write was
    received, so it has an epoch — whether its data reached the backing
    device is what E decides;
  - a barrier that never completed may or may not have been seen: it only
    widens the bounds above (nothing is forced after it), except that its
    own FUA write, if that is what it is, then closes epoch j - 1.
The image is consistent iff some E in 0..m (m barriers) and some epoch for
every write within those bounds make every block hold: the write of its
content has epoch <= E and the block's next write (if any) has epoch >= E;
zeros: the block's first write (if any) has epoch >= E. (Versions of epoch E
may be any of them; a version from before E must be the last one before E.)
Each constraint follows from what the client saw, so every violation
reported is real; the bounds are the client's, so a daemon that orders
correctly always passes. Inside that, the search is exact: lower bounds are
propagated along "acknowledged before issued", and a bound crossing an
upper bound means no assignment exists for that E.
The writer must keep at most one barrier in flight and never two writes to
the same block in flight (then barrier order and each block's version order
are the issue order); a history that breaks either is refused (exit 2).
"""

import argparse
import hashlib
import os
import struct
import sys

BLOCK = 4096
MAGIC = b"UBEPOCH1"
HDR = struct.Struct("<8sIIQI")  # magic, writer, seq, block, epoch
ZERO = bytes(BLOCK)
ABSENT = None  # replaced by m + 1 per history


def make_block(writer, seq, block, epoch):
    hdr = HDR.pack(MAGIC, writer, seq, block, epoch)
    body = hashlib.sha256(hdr).digest() * ((BLOCK - len(hdr)) // 32 + 1)
    return hdr + body[:BLOCK - len(hdr)]


def parse_block(data):
    """(writer, seq, block, epoch) of a stamped block, or None."""
    magic, writer, seq, block, epoch = HDR.unpack_from(data)
    if magic != MAGIC:
        return None
    return writer, seq, block, epoch


class HistoryError(Exception):
    pass


class History:
    """The events of one run: writes, barriers, their bounds."""

    def __init__(self, lines):
        self.writes = {}      # (writer, seq) -> dict
        self.order = []       # (pos, kind, key): 'I' issue / 'A' ack of a write
        self.barriers = []    # dicts: issue, done (None), fua (key or None)
        flushes = {}
        for pos, line in enumerate(lines):
            f = line.split()
            if not f:
                continue
            if f[0] == "W":
                key = (int(f[1]), int(f[2]))
                if key in self.writes:
                    raise HistoryError(f"line {pos + 1}: write {key} issued twice")
                w = dict(key=key, block=int(f[3]), fua=f[4] == "1", issue=pos, ack=None)
                self.writes[key] = w
                if w["fua"]:
                    self.barriers.append(dict(issue=pos, done=None, fua=key))
            elif f[0] == "A":
                w = self.writes[(int(f[1]), int(f[2]))]
                w["ack"] = pos
                if w["fua"]:
                    next(b for b in self.barriers if b["fua"] == w["key"])["done"] = pos
            elif f[0] == "F":
                b = dict(issue=pos, done=None, fua=None)
                flushes[f[1]] = b
                self.barriers.append(b)
            elif f[0] == "D":
                flushes[f[1]]["done"] = pos
        self.barriers.sort(key=lambda b: b["issue"])
        for a, b in zip(self.barriers, self.barriers[1:]):
            if a["done"] is None or a["done"] > b["issue"]:
                raise HistoryError(f"barriers at lines {a['issue'] + 1} and {b['issue'] + 1} overlap "
                                   "(or the first never completed): this checker needs one at a time")
        self.m = len(self.barriers)
        # Barriers complete in issue order (one at a time, checked above):
        # the first `completed` did, at most the last one did not.
        self.completed = sum(1 for b in self.barriers if b["done"] is not None)
        self.absent = self.m + 1
        # Bounds of every write's epoch.
        for j, b in enumerate(self.barriers, 1):
            b["index"] = j
            if b["fua"]:
                w = self.writes[b["fua"]]
                w["lo"] = w["hi"] = j - 1
        issues = [b["issue"] for b in self.barriers]
        dones = [b["done"] for b in self.barriers]
        for w in self.writes.values():
            if w["fua"]:
                continue
            w["lo"] = sum(1 for d in dones if d is not None and d < w["issue"])
            if w["ack"] is None:
                w["hi"] = self.absent
            else:
                w["hi"] = sum(1 for i in issues if i < w["ack"])
        # Versions of every block, in order; no two in flight at once.
        self.versions = {}
        for w in sorted(self.writes.values(), key=lambda w: w["issue"]):
            vs = self.versions.setdefault(w["block"], [])
            if vs and (vs[-1]["ack"] is None or vs[-1]["ack"] > w["issue"]):
                raise HistoryError(f"block {w['block']}: writes {vs[-1]['key']} and {w['key']} in flight "
                                   "at once: this checker needs them one after the other")
            vs.append(w)
        for pos_key in self.writes.values():
            self.order.append((pos_key["issue"], "I", pos_key["key"]))
            if pos_key["ack"] is not None:
                self.order.append((pos_key["ack"], "A", pos_key["key"]))
        self.order.sort()

    def propagate(self, lo, hi):
        """Lower bounds carried along acknowledged-before-issued; returns
        (propagated lo, first write whose bound crosses its hi or None)."""
        run = 0
        out = {}
        first_bad = None
        for _, kind, key in self.order:
            if kind == "I":
                v = max(lo[key], run)
                out[key] = v
                if v > hi[key] and first_bad is None:
                    first_bad = key
            else:
                run = max(run, out[key])
        return out, first_bad


def name(key):
    return f"write {key[0]}.{key[1]}"


def check(hist, contents):
    """contents: iterable of (block, bytes). Returns (E or None, report
    lines: the verdict, then what the image holds)."""
    contents = list(contents)
    e, report = _check(hist, contents)
    held = sum(1 for _, data in contents if data != ZERO)
    report.append(f"image: {held} of {len(contents)} blocks hold a write ({len(hist.versions)} blocks written, "
                  f"{len(hist.writes)} writes, {hist.m} barriers)")
    return e, report


def _check(hist, contents):
    report = []
    hard = []                # blocks wrong whatever E
    needs = {}               # block -> (content write or None, next write or None)
    for blk, data in contents:
        vs = hist.versions.get(blk, [])
        if data == ZERO:
            needs[blk] = (None, vs[0] if vs else None)
            continue
        st = parse_block(data)
        if st is None:
            hard.append(f"block {blk}: neither zeros nor a stamped block (torn or garbage)")
            continue
        key = (st[0], st[1])
        w = hist.writes.get(key)
        if w is None or w["block"] != blk or st[2] != blk:
            hard.append(f"block {blk}: holds {name(key)} (of block {st[2]}), which the history never wrote there")
            continue
        if data != make_block(*st):
            hard.append(f"block {blk}: {name(key)}'s header but not its bytes (torn)")
            continue
        i = vs.index(w)
        needs[blk] = (w, vs[i + 1] if i + 1 < len(vs) else None)
    if hard:
        return None, hard + [f"{len(hard)} block(s) hold what no epoch allows"]

    base_lo = {k: w["lo"] for k, w in hist.writes.items()}
    base_hi = {k: w["hi"] for k, w in hist.writes.items()}
    plo, bad = hist.propagate(base_lo, base_hi)
    if bad is not None:
        raise HistoryError(f"the history alone is contradictory at {name(bad)}")
    # Each block alone: E >= the earliest epoch of its content, E <= the
    # latest epoch of its next version.
    need_ge = max(((plo[c["key"]], b) for b, (c, _) in needs.items() if c), default=(0, None))
    need_le = min(((base_hi[n["key"]], b) for b, (_, n) in needs.items() if n), default=(hist.m, None))
    top = min(need_le[0], hist.m)
    if need_ge[0] > top:
        bg, bl = need_ge[1], need_le[1]
        c = needs[bg][0]
        n = needs[bl][1]
        held = f"{name(needs[bl][0]['key'])}" if needs[bl][0] else "zeros"
        report.append(f"VIOLATION: block {bg} holds {name(c['key'])} (epoch >= {need_ge[0]}), but block {bl} "
                      f"still holds {held} without its next version {name(n['key'])} (epoch <= {need_le[0]}): "
                      f"no epoch E fits both (the history has {hist.m} barriers)")
        return None, report
    last_fail = None
    for e in range(top, need_ge[0] - 1, -1):
        lo = dict(base_lo)
        hi = dict(base_hi)
        for b, (c, n) in needs.items():
            if c:
                hi[c["key"]] = min(hi[c["key"]], e)
            if n:
                lo[n["key"]] = max(lo[n["key"]], e)
        _, bad = hist.propagate(lo, hi)
        if bad is None:
            report.append(f"consistent: E = {e} of {hist.m} barriers ({hist.completed} completed; "
                          f"{len(hist.writes)} writes; "
                          f"{sum(1 for c, _ in needs.values() if c)} blocks hold a write, the rest zeros)")
            return e, report
        if last_fail is None:
            last_fail = (e, bad)
    e, bad = last_fail
    report.append(f"VIOLATION: no epoch E in {need_ge[0]}..{top} fits; at E = {e}, {name(bad)} "
                  f"(block {hist.writes[bad]['block']}) would have to be both before and after epoch {e}, "
                  "given the writes acknowledged before it was issued")
    return None, report


def read_image(path, offset, blocks):
    with open(path, "rb") as f:
        for b in range(blocks):
            f.seek(offset + b * BLOCK)
            data = f.read(BLOCK)
            if len(data) < BLOCK:
                data += bytes(BLOCK - len(data))
            yield b, data


def cmd_check(args):
    with open(args.log) as f:
        lines = f.read().splitlines()
    try:
        hist = History(lines)
        e, report = check(hist, read_image(args.image, args.offset, args.blocks))
    except HistoryError as ex:
        print(f"epoch_check: cannot judge: {ex}")
        return 2
    print("\n".join(report))
    return 0 if e is not None else 1


# ---- selftest: hand-made histories ----

class Sim:
    def __init__(self, nblocks=8):
        self.lines, self.disk, self.seq, self.fid = [], [ZERO] * nblocks, 0, 0
        self.epoch = 0

    def issue(self, block, fua=False, writer=0):
        self.seq += 1
        self.lines.append(f"W {writer} {self.seq} {block} {int(fua)} {self.epoch}")
        return (writer, self.seq, block, self.epoch)

    def ack(self, w):
        self.lines.append(f"A {w[0]} {w[1]}")
        if self.lines[-1] and any(l.startswith(f"W {w[0]} {w[1]} ") and l.split()[4] == "1" for l in self.lines):
            self.epoch += 1

    def write(self, block, fua=False, land=True):
        w = self.issue(block, fua)
        self.ack(w)
        if land:
            self.land(w)
        return w

    def land(self, w):
        self.disk[w[2]] = make_block(*w)

    def flush_issue(self):
        self.fid += 1
        self.lines.append(f"F {self.fid}")
        return self.fid

    def flush_done(self, fid):
        self.lines.append(f"D {fid}")
        self.epoch += 1

    def flush(self):
        self.flush_done(self.flush_issue())


def selftest(_args=None):
    failures = 0

    def case(title, build, want_e=None, want=None):
        """want_e: the E it must find (pass); want: a phrase of the violation
        (fail) or of the refusal."""
        nonlocal failures
        s = Sim()
        build(s)
        try:
            e, report = check(History(s.lines), enumerate(s.disk))
        except HistoryError as ex:
            e, report = "refused", [str(ex)]
        text = "\n".join(report)
        if want is None:
            ok = e == want_e
        else:
            ok = e is None or e == "refused"
            ok = ok and want in text
        failures += not ok
        print(f"selftest: {'ok  ' if ok else 'FAIL'} {title}: E = {e}")
        if not ok or os.environ.get("EPOCH_CHECK_VERBOSE"):
            print("  " + text.replace("\n", "\n  "))

    case("nothing written back: zeros everywhere", lambda s: [s.write(1, land=False), s.flush()], want_e=0)

    def all_back(s):
        s.write(1); s.flush(); s.write(2); s.flush()
    case("everything written back", all_back, want_e=2)

    def lba_order(s):
        s.write(5, land=False); s.flush()    # epoch 0: block 5, not written back
        s.write(2); s.flush()                # epoch 1: block 2, written back first (lower address)
    case("a later epoch's block without an earlier epoch's (lba order)", lba_order, want="block 2 holds")

    def partial_epoch(s):
        s.write(1); s.write(2); s.flush()
        s.write(3); s.write(4, land=False); s.flush()
        s.write(5, land=False)
    case("epoch 0 whole, epoch 1 in part", partial_epoch, want_e=1)

    def intermediate_in_e(s):
        s.write(1); s.flush()
        a = s.write(3); s.write(3, land=False); s.write(4, land=False)
        s.land(a)
    case("an earlier version of epoch E", intermediate_in_e, want_e=1)

    def intermediate_before_e(s):
        a = s.write(3); s.write(3, land=False); s.flush()   # epoch 0: 3 twice, the first on disk
        s.write(4)                                           # epoch 1 on disk
        s.land(a)
    case("an earlier version of an epoch before E", intermediate_before_e, want="block 4 holds")

    def old_version_kept(s):
        s.write(3); s.flush()                # epoch 0: 3 = v1 (on disk)
        s.write(4); s.write(3, land=False)   # epoch 1: 4 on disk, 3 = v2 not yet
    case("epoch 1 in part: a block keeps its epoch-0 version", old_version_kept, want_e=1)

    def concurrent_with_flush(s):
        s.write(1)
        w = s.issue(2)                       # in flight across the FLUSH
        f = s.flush_issue()
        s.ack(w); s.land(w)
        s.flush_done(f)
        s.write(3, land=False)               # epoch 1
        s.write(1, land=False)               # epoch 1: block 1's next version
    case("a write in flight across a FLUSH may be in the epoch before it", concurrent_with_flush, want_e=1)

    def issued_after_flush(s):
        s.write(1, land=False)
        s.flush()
        s.write(2)                           # issued after the FLUSH completed: epoch 1
    case("... but one issued after the FLUSH completed is not", issued_after_flush, want="block 2 holds")

    def fua_closes(s):
        s.write(5, fua=True, land=False)     # closes epoch 0
        s.write(2)                           # epoch 1
    case("a FUA write closes its epoch", fua_closes, want="block 2 holds")

    def no_fua(s):
        s.write(5, land=False)
        s.write(2)
    case("... a plain write does not", no_fua, want_e=0)

    def unacked_landed(s):
        s.write(1); s.flush()
        w = s.issue(6)                       # in flight at the kill
        s.land(w)
    case("a write in flight at the kill may have landed", unacked_landed, want_e=1)

    def unacked_absent(s):
        s.write(1); s.flush()
        s.issue(6)
    case("... or not", unacked_absent, want_e=1)

    def fua_in_flight(s):
        s.write(1); s.flush()
        s.issue(6, fua=True)                 # barrier 2, in flight at the kill, never landed
    case("a FUA write in flight at the kill is a barrier that need not be there", fua_in_flight, want_e=1)

    def unfinished_flush(s):
        s.write(1); s.write(1, land=False)   # block 1: v1 on disk, v2 not
        s.flush_issue()                      # never completed
        w = s.issue(2); s.land(w)            # in flight, landed
    case("a FLUSH that never completed forces nothing", unfinished_flush, want_e=0)

    def chain(s):
        s.write(1, land=False)
        f = s.flush_issue()
        w = s.issue(2)                       # concurrent with the FLUSH: either side
        s.flush_done(f)
        s.ack(w)
        s.write(3)                           # issued after w was acked and after the FLUSH: epoch 1
        s.land(w)
    case("epoch 1 on disk, block 1 of epoch 0 missing, via a chain", chain, want="block 3 holds")

    def zeroed(s):
        s.write(1); s.flush()
        s.disk[1] = os.urandom(BLOCK)
    case("garbage is wrong whatever E", zeroed, want="garbage")

    def torn(s):
        a = s.write(1); s.flush()
        b = s.write(1)
        s.disk[1] = make_block(*b)[:2048] + make_block(*a)[2048:]
    case("a torn block is wrong whatever E", torn, want="torn")

    def misplaced(s):
        w = s.write(1); s.flush()
        s.disk[2] = make_block(*w)
    case("another block's write is wrong", misplaced, want="never wrote there")

    def never_issued(s):
        s.disk[4] = make_block(9, 99, 4, 0)
    case("a write never issued is wrong", never_issued, want="never wrote there")

    def overlap(s):
        s.issue(1); s.issue(1)
    case("two writes to one block in flight at once: refused", overlap, want="in flight at once")

    def barriers_overlap(s):
        s.flush_issue(); s.flush_issue()
    case("two barriers in flight at once: refused", barriers_overlap, want="overlap")

    failures += model_selftest()
    print(f"selftest: {'all ok' if failures == 0 else f'{failures} case(s) FAILED'}")
    return 1 if failures else 0


# ---- selftest, part 2: a model of the daemon, checked at every step ----

def model_run(seed, ordered, nblocks=16, steps=160, writers=3):
    """A random history of WRITERS clients (one request each in flight, the
    writer's rules kept), a daemon that receives the issued requests in any
    order and writes back either epoch by epoch (ordered: inside an epoch,
    any block first and any of its versions, the last one before the next
    epoch) or in address order (lba: each dirty block's newest version,
    ascending, round and round). After every step the backing image is
    checked as if the cache were lost then. Returns (steps checked, steps
    failed, first failure or None); an ordered run must never fail and must
    find E >= the epoch its writeback is in."""
    import random
    rng = random.Random(seed)
    lines, backing = [], [ZERO] * nblocks
    idle = list(range(writers))
    pending, received = [], []        # requests issued / processed, not acknowledged
    busy, barrier = set(), [False]
    seq, fid = [0], [0]
    cur = [0]                         # barriers the daemon processed: its epoch
    epochs = [{}]                     # epoch -> block -> [versions], in order
    done = [{}]                       # ordered: block of epoch `we` -> its versions when written back last
    we = [0]
    dirty, ptr = {}, [0]              # lba
    checked = failed = 0
    first = None

    def issue():
        wr = idle.pop(rng.randrange(len(idle)))
        r = rng.random()
        if r < 0.12 and not barrier[0]:
            barrier[0] = True
            fid[0] += 1
            lines.append(f"F {fid[0]}")
            pending.append(dict(kind="F", fid=fid[0], writer=wr))
            return
        free = [b for b in range(nblocks) if b not in busy]
        if not free:
            idle.append(wr)
            return
        fua = r < 0.2 and not barrier[0]
        if fua:
            barrier[0] = True
        blk = rng.choice(free)
        busy.add(blk)
        seq[0] += 1
        lines.append(f"W {wr} {seq[0]} {blk} {int(fua)} 0")
        pending.append(dict(kind="W", writer=wr, seq=seq[0], block=blk, fua=fua,
                            data=make_block(wr, seq[0], blk, 0)))

    def receive():
        q = pending.pop(rng.randrange(len(pending)))
        if q["kind"] == "W":
            epochs[cur[0]].setdefault(q["block"], []).append(q["data"])
            dirty[q["block"]] = q["data"]
        if q["kind"] == "F" or q["fua"]:
            cur[0] += 1
            epochs.append({})
        received.append(q)

    def ack():
        q = received.pop(rng.randrange(len(received)))
        if q["kind"] == "F":
            lines.append(f"D {q['fid']}")
            barrier[0] = False
        else:
            lines.append(f"A {q['writer']} {q['seq']}")
            busy.discard(q["block"])
            if q["fua"]:
                barrier[0] = False
        idle.append(q["writer"])

    def writeback():
        if ordered:
            ep = epochs[we[0]]
            todo = [b for b in ep if done[0].get(b) != len(ep[b])]
            if not todo:
                if cur[0] > we[0]:    # epoch closed and all of it written back
                    we[0] += 1
                    done[0] = {}
                return
            b = rng.choice(todo)
            vs = ep[b]
            i = rng.randrange(len(vs)) if rng.random() < 0.3 else len(vs) - 1
            backing[b] = vs[i]
            if i == len(vs) - 1:
                done[0][b] = len(vs)
        else:
            later = sorted(b for b in dirty if b >= ptr[0]) or sorted(dirty)
            if later:
                b = later[0]
                backing[b] = dirty.pop(b)
                ptr[0] = b + 1

    for _ in range(steps):
        acts = []
        if idle:
            acts.append(issue)
        if pending:
            acts.append(receive)
        if received:
            acts.append(ack)
        rng.choice(acts)() if acts and rng.random() < 0.75 else writeback()
        e, report = check(History(lines), enumerate(backing))
        checked += 1
        bad = e is None or (ordered and e < we[0])
        if bad:
            failed += 1
            if first is None:
                first = "\n".join(lines) + "\n" + "\n".join(report) + f"\n(ordered writeback in epoch {we[0]})"
    return checked, failed, first


def model_selftest(runs=12):
    failures = 0
    for ordered in (True, False):
        checked = failed = caught_runs = 0
        first = None
        for seed in range(runs):
            c, f, fi = model_run(seed, ordered)
            checked += c
            failed += f
            caught_runs += f > 0
            first = first or fi
        if ordered:
            ok = failed == 0
            what = f"ordered writeback passes at every step ({checked} steps, {runs} runs): {failed} failed"
        else:
            ok = caught_runs > runs // 2
            what = (f"address-order writeback is caught ({checked} steps, {runs} runs): "
                    f"{failed} steps in {caught_runs} runs inconsistent")
        failures += not ok
        print(f"selftest: {'ok  ' if ok else 'FAIL'} model: {what}")
        if ordered and not ok:
            print("  " + first.replace("\n", "\n  "))
    return failures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("check")
    sp.add_argument("--log", required=True, help="the history")
    sp.add_argument("--image", required=True, help="the backing image (a file or a device)")
    sp.add_argument("--offset", type=int, default=0, help="byte of block 0 in the image")
    sp.add_argument("--blocks", type=int, required=True)
    sub.add_parser("selftest")
    args = p.parse_args()
    sys.exit({"check": cmd_check, "selftest": selftest}[args.cmd](args))


if __name__ == "__main__":
    main()
