#!/usr/bin/env python3
"""Polls a ubcache control socket like a metrics scraper: RATE queries a
second, cycling priority-stats, stats and metrics, until SIGTERM/SIGINT or
--seconds; one connection for all of them, or (--connect-each) one per
query as `ubcache ctl` does. Each query's latency
is connect to final frame. Prints one JSON object: count, errors, p50_ms,
p99_ms, max_ms.

Usage: ctl_poller.py SOCKET [--rate 100] [--seconds N] [--commands priority-stats,stats,metrics]
       [--connect-each]"""
import json
import signal
import socket
import sys
import time

COMMANDS = [b"ubcache-ctl/1 priority-stats\n", b"ubcache-ctl/1 stats\n", b"ubcache-ctl/1 metrics\n"]


class Client:
    def __init__(self, path, connect_each):
        self.path, self.connect_each, self.sock = path, connect_each, None

    def query(self, req):
        """One request; True when the daemon answered ok."""
        if self.sock is None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(self.path)
        try:
            self.sock.sendall(req)
            buf = b""
            while True:
                nl = buf.find(b"\n")
                if nl >= 0:
                    kind, length = buf[:nl].split(b" ")
                    end = nl + 1 + int(length)
                    if len(buf) >= end:
                        buf = buf[end:]
                        if kind != b"progress":
                            return kind == b"ok"
                        continue
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise OSError("closed")
                buf += chunk
        except OSError:
            self.close()
            raise
        finally:
            if self.connect_each:
                self.close()

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def main():
    path = sys.argv[1]
    rate = 100.0
    seconds = None
    connect_each = False
    args = sys.argv[2:]
    while args:
        if args[0] == "--rate":
            rate = float(args[1])
        elif args[0] == "--commands":
            COMMANDS[:] = [f"ubcache-ctl/1 {c}\n".encode() for c in args[1].split(",")]
        elif args[0] == "--connect-each":
            connect_each = True
            args = args[1:]
            continue
        elif args[0] == "--seconds":
            seconds = float(args[1])
        else:
            sys.exit(f"unknown argument {args[0]}")
        args = args[2:]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    lat, errors = [], 0
    client = Client(path, connect_each)
    period = 1.0 / rate
    start = time.monotonic()
    n = 0
    while not stop and (seconds is None or time.monotonic() - start < seconds):
        t0 = time.perf_counter()
        ok = False
        try:
            ok = client.query(COMMANDS[n % len(COMMANDS)])
        except OSError:
            pass
        lat.append((time.perf_counter() - t0) * 1000)
        errors += 0 if ok else 1
        n += 1
        # Fixed schedule: a slow query does not slow the rate down.
        delay = start + n * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    lat.sort()
    pct = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))], 3) if lat else None
    print(json.dumps({"count": len(lat), "errors": errors, "rate": round(len(lat) / (time.monotonic() - start), 1),
                      "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": round(lat[-1], 3) if lat else None}))


main()
