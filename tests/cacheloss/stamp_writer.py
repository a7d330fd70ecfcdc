#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""stamp_writer — stamped 4 KiB writes and FLUSHes over NBD, every issue and
reply logged in the history format of tests/integration/epoch_check.py.

WRITERS threads, one NBD connection each (ubcache offers CAN_MULTI_CONN: a
FLUSH on one connection covers the writes acknowledged on all of them), write
random blocks of a region; now and then one of them sends a FLUSH or a FUA
write. What the checker needs, the writer guarantees: one barrier (FLUSH or
FUA write) in flight at a time, never two writes to one block in flight.
The other writers keep writing while a barrier is in flight, so some writes
straddle it. Runs until the connection dies (the daemon killed), or
--duration seconds; then writes the log and a summary line and exits 0.
"""

import argparse
import os
import random
import sys
import threading
import time

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from epoch_check import BLOCK, make_block  # noqa: E402


class Run:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()        # the log, busy blocks, counters
        self.barrier = threading.Lock()     # one barrier in flight
        self.events = []
        self.busy = set()
        self.epoch = 0                      # barriers completed
        self.fid = 0
        self.stop = threading.Event()
        self.error = None
        self.n = dict(writes=0, acked=0, fua=0, flushes=0, done=0)

    def log(self, line):
        self.events.append(line)

    def writer(self, wid):
        a = self.args
        rnd = random.Random(a.seed * 1000 + wid)
        h = nbd.NBD()
        try:
            h.connect_uri(a.uri)
        except nbd.Error as e:
            self.fail(f"writer {wid}: connect: {e}")
            return
        if a.ready and wid == 0:
            open(a.ready, "w").close()
        seq = 0
        period = a.writers / a.rate if a.rate else 0
        next_t = time.monotonic()
        while not self.stop.is_set():
            if period:
                next_t += period
                d = next_t - time.monotonic()
                if d > 0:
                    time.sleep(d)
            r = rnd.random()
            if r < 1.0 / a.flush_every:
                with self.barrier:
                    with self.lock:
                        # A barrier that failed released the lock after
                        # stopping the run: none may follow it.
                        if self.stop.is_set():
                            break
                        self.fid += 1
                        fid = self.fid
                        self.n["flushes"] += 1
                        self.log(f"F {fid}")
                    try:
                        h.flush()
                    except nbd.Error as e:
                        self.fail(f"flush: {e}")
                        return
                    with self.lock:
                        self.n["done"] += 1
                        self.epoch += 1
                        self.log(f"D {fid}")
                continue
            fua = r < 1.0 / a.flush_every + a.fua_pct / 100
            seq += 1
            if fua:
                self.barrier.acquire()
            try:
                with self.lock:
                    if self.stop.is_set():
                        break
                    while True:
                        blk = rnd.randrange(a.blocks)
                        if blk not in self.busy:
                            break
                    self.busy.add(blk)
                    ep = self.epoch
                    self.n["writes"] += 1
                    self.n["fua"] += fua
                    self.log(f"W {wid} {seq} {blk} {int(fua)} {ep}")
                try:
                    h.pwrite(make_block(wid, seq, blk, ep), (a.first_block + blk) * BLOCK,
                             nbd.CMD_FLAG_FUA if fua else 0)
                except nbd.Error as e:
                    self.fail(f"write: {e}")
                    return
                with self.lock:
                    self.busy.discard(blk)
                    self.n["acked"] += 1
                    if fua:
                        self.epoch += 1
                    self.log(f"A {wid} {seq}")
            finally:
                if fua:
                    self.barrier.release()
        try:
            h.shutdown()
        except nbd.Error:
            pass

    def fail(self, msg):
        with self.lock:
            if self.error is None:
                self.error = msg
        self.stop.set()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("uri")
    p.add_argument("--log", required=True, help="the history (epoch_check.py's format)")
    p.add_argument("--blocks", type=int, required=True, help="region, 4 KiB blocks")
    p.add_argument("--first-block", type=int, default=0)
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--flush-every", type=float, default=40, help="mean requests between FLUSHes")
    p.add_argument("--fua-pct", type=float, default=2)
    p.add_argument("--rate", type=float, default=1000, help="requests/s of all writers together (0: no limit)")
    p.add_argument("--duration", type=float, default=0, help="stop after S s (0: until the connection dies)")
    p.add_argument("--ready", help="create this file once connected")
    a = p.parse_args()
    run = Run(a)
    threads = [threading.Thread(target=run.writer, args=(i,), daemon=True) for i in range(a.writers)]
    for t in threads:
        t.start()
    if a.duration:
        run.stop.wait(a.duration)
        run.stop.set()
    for t in threads:
        t.join()
    with open(a.log, "w") as f:
        f.write("\n".join(run.events) + "\n")
    n = run.n
    print(f"stamp_writer: {n['writes']} writes ({n['acked']} acked, {n['fua']} FUA), "
          f"{n['flushes']} flushes ({n['done']} done); ended by: {run.error or 'duration'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
