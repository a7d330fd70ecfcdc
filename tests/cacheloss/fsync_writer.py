#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fsync_writer — new files, each fsynced with its directory, and a log of
when each fsync returned; then the check of a filesystem copy against the log
(tests/integration/178-cacheloss-ext4.sh, issue 30 test c).

  fsync_writer.py write --dir DIR --log LOG [--size 65536] [--rate N] [--seed S] [--ready F]
      Creates DIR/f<seq>-<sha256 prefix> (O_EXCL: every name is new), writes
      SIZE bytes (random, made from S and seq), fsync(file), fsync(DIR), and
      only then appends "seq name sha256 t_start t_done" to LOG (t_done:
      time.time() after the directory's fsync returned, so every write of
      the file and of its directory entry was acknowledged before t_done).
      The log is on another filesystem and is flushed line by line: it
      outlives the one under test. Runs until an error (the device under DIR
      died: EIO, EROFS, ENOTCONN) or SIGTERM; prints a summary line and
      exits 0.

  fsync_writer.py check --log LOG --root DIR --before T [--ok-list F]
      DIR: the same directory on a copy of the filesystem. Every file logged
      with t_done < T must be there with its content (an fsync that
      returned before T is a promise the copy keeps). The files logged later
      may be there or not (a power cut after T may lose them) and are
      counted by what the copy holds: intact, absent, empty, short,
      full-size with zeros for some blocks (ext4 reads an extent allocated
      but not yet written as zeros: a cut before the data landed), or
      full-size with other nonzero data (stale blocks; ext4's ordered mode
      should not show that after a power cut) — one NOTE line each. Files
      in DIR the log does not name (created, fsync not returned) are
      counted too. Exit 0, or 1 with one BROKEN line per broken promise.
      --ok-list writes the log lines of the files found intact (the
      self-check picks the files it damages there).
"""

import argparse
import errno
import hashlib
import os
import random
import signal
import sys
import time


def content(seed, seq, size):
    """The bytes of file `seq`: random, and the checker can make them again."""
    return random.Random(f"{seed}-{seq}").randbytes(size)


def write(a):
    os.makedirs(a.dir, exist_ok=True)
    dfd = os.open(a.dir, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    log = open(a.log, "a", buffering=1)
    log.write(f"# fsync_writer seed {a.seed} size {a.size}\n")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append("SIGTERM"))
    if a.ready:
        open(a.ready, "w").close()
    seq, first, last, err = 0, None, None, None
    period = 1.0 / a.rate if a.rate else 0.0
    next_t = time.monotonic()
    try:
        while not stop:
            data = content(a.seed, seq, a.size)
            digest = hashlib.sha256(data).hexdigest()
            name = f"f{seq:07d}-{digest[:16]}"
            t_start = time.time()
            fd = os.open(os.path.join(a.dir, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.fsync(dfd)
            t_done = time.time()
            log.write(f"{seq} {name} {digest} {t_start:.6f} {t_done:.6f}\n")
            first = first if first is not None else t_done
            last = t_done
            seq += 1
            if period:
                next_t += period
                delay = next_t - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    next_t = time.monotonic()
    except OSError as e:
        err = f"{errno.errorcode.get(e.errno, e.errno)} ({e.strerror})"
    log.close()
    span = f", fsyncs returned {first:.3f} .. {last:.3f}" if seq else ""
    print(f"fsync_writer: {seq} files of {a.size} bytes fsynced{span}; "
          f"ended by: {err or (stop[0] if stop else 'nothing')}")
    return 0


def read_log(path):
    seed, size, entries = None, None, []
    with open(path) as f:
        for line in f:
            p = line.split()
            if line.startswith("# fsync_writer seed "):
                seed, size = int(p[3]), int(p[5])
            elif len(p) == 5:  # a line cut short cannot be one whose fsync returned
                entries.append(dict(seq=int(p[0]), name=p[1], sha=p[2], t_start=float(p[3]),
                                    t_done=float(p[4]), line=line))
    if seed is None:
        raise SystemExit(f"{path}: no '# fsync_writer seed' line")
    return seed, size, entries


BLOCK = 4096
ZERO = bytes(BLOCK)


def judge(path, want):
    """What the copy holds for a file: (kind, words)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return "absent", "absent"
    except OSError as err:
        return "unreadable", f"unreadable ({err.strerror})"
    if data == want:
        return "ok", "intact"
    if not data:
        return "empty", "empty"
    if len(data) != len(want):
        return "short", f"{len(data)} bytes, want {len(want)}"
    blocks = [(data[o:o + BLOCK], want[o:o + BLOCK]) for o in range(0, len(want), BLOCK)]
    zeros = sum(1 for d, w in blocks if d != w and d == ZERO)
    other = sum(1 for d, w in blocks if d != w and d != ZERO)
    if other == 0:
        # An extent allocated and its size committed, the data not yet
        # written (ext4 reads an unwritten extent as zeros): a power cut
        # before the data's write completed leaves that.
        return "zeros", f"full size, {zeros} of {len(blocks)} blocks zeros instead of its data"
    return "foreign", f"full size, {other} of {len(blocks)} blocks other (nonzero) data, {zeros} zeros"


def check(a):
    seed, size, entries = read_log(a.log)
    note = ""
    try:
        present = set(os.listdir(a.root))
    except OSError as err:
        present, note = set(), f" (its directory unreadable: {err.strerror})"
    kinds = ("ok", "absent", "empty", "short", "zeros", "foreign", "unreadable")
    before = dict.fromkeys(kinds, 0)
    after = dict.fromkeys(kinds, 0)
    bad, notes, ok_lines = [], [], []
    for e in entries:
        if e["name"] in present:
            kind, words = judge(os.path.join(a.root, e["name"]), content(seed, e["seq"], size))
        else:
            kind, words = "absent", "absent"
        if kind == "ok":
            ok_lines.append(e["line"])
        if e["t_done"] < a.before:
            before[kind] += 1
            if kind != "ok":
                bad.append(f"{e['name']}: fsync returned at {e['t_done']:.6f} < T = {a.before}, "
                           f"but on the copy: {words}")
        else:
            after[kind] += 1
            if kind not in ("ok", "absent"):
                notes.append(f"{e['name']}: fsync returned {e['t_done'] - a.before:.3f} s after T: {words}")
    logged = {e["name"] for e in entries}
    unlogged = len([x for x in present if x not in logged])
    if a.ok_list:
        with open(a.ok_list, "w") as f:
            f.writelines(ok_lines)
    last_before = max((e["t_done"] for e in entries if e["t_done"] < a.before), default=None)
    n_before, n_after = sum(before.values()), sum(after.values())
    print(f"check: fsynced before T: {n_before}, {before['ok']} intact"
          f"{'' if last_before is None else f' (the last {a.before - last_before:.3f} s before T)'}; "
          f"after T: {n_after}: {after['ok']} intact, {after['absent']} absent, {after['empty']} empty, "
          f"{after['short']} short, {after['zeros']} full-size with zeros, "
          f"{after['foreign']} full-size with other data, {after['unreadable']} unreadable; "
          f"{unlogged} files on the copy not in the log{note}")
    for line in bad:
        print(f"BROKEN: {line}")
    for line in notes:
        print(f"NOTE: {line}")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--dir", required=True)
    w.add_argument("--log", required=True)
    w.add_argument("--size", type=int, default=65536)
    w.add_argument("--rate", type=float, default=0, help="files per second at most (0: as fast as fsync allows)")
    w.add_argument("--ready")
    w.add_argument("--seed", type=int, default=0, help="of the files' contents (the checker makes them again)")
    c = sub.add_parser("check")
    c.add_argument("--log", required=True)
    c.add_argument("--root", required=True)
    c.add_argument("--before", type=float, required=True)
    c.add_argument("--ok-list")
    a = p.parse_args()
    return write(a) if a.cmd == "write" else check(a)


if __name__ == "__main__":
    sys.exit(main())
