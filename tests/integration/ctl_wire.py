# SPDX-License-Identifier: Apache-2.0
"""The control socket's wire protocol, for tests that time the daemon and
must not pay for starting a `ubcache ctl` process (a sanitized build's
start-up on a loaded machine takes longer than what they measure).

request(path, command) sends "ubcache-ctl/1 COMMAND" on a new connection
and returns the first reply frame that is not progress: (kind, payload),
kind "ok" or "error". Frames are "KIND LENGTH\\n" and LENGTH bytes.
"""
import socket


def request(path, command, timeout=10):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(f"ubcache-ctl/1 {command}\n".encode())
        buf = b""
        while True:
            nl = buf.find(b"\n")
            if nl >= 0:
                kind, n = buf[:nl].split(b" ")
                end = nl + 1 + int(n)
                if len(buf) >= end:
                    payload = buf[nl + 1:end].decode(errors="replace")
                    buf = buf[end:]
                    if kind != b"progress":
                        return kind.decode(), payload
                    continue
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError(f"{command}: connection closed before a reply")
            buf += chunk
    finally:
        s.close()
