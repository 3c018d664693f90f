#!/usr/bin/env python3
"""Byte-counting TCP proxy for bench/link.sh (stdlib only, asyncio).

    link-proxy.py --target HOST:PORT --port-file F --stats F

Listens on a loopback port the kernel picks (written to --port-file once it
listens) and forwards every connection to --target, unchanged (TLS passes
through: nothing is decrypted). Counts bytes client→server ("up") and
server→client ("down"), connections opened and closed, and the ALPN
protocols each connection's TLS ClientHello offers ("h2,http/1.1" or
"http/1.1"; "-" when the hello has no ALPN, "?" when it could not be read).
The counters are written as JSON to --stats (atomically: a temporary file
renamed) on SIGUSR1 and on exit; "dumps" counts the SIGUSR1s seen, so a
reader can tell its reading from an older one.
"""
import argparse
import asyncio
import json
import os
import signal
import socket
import time

C = {"up": 0, "down": 0, "opened": 0, "closed": 0, "alpn": {}, "dumps": 0}


def alpn_offer(hello: bytes):
    """The ALPN protocols a TLS ClientHello offers: None while incomplete."""
    # TLS records (type 22, handshake) can split the hello: join fragments.
    hs, i = b"", 0
    while i + 5 <= len(hello):
        if hello[i] != 22:
            return "?"
        n = int.from_bytes(hello[i + 3:i + 5], "big")
        if i + 5 + n > len(hello):
            break
        hs += hello[i + 5:i + 5 + n]
        i += 5 + n
    if len(hs) < 4:
        return None
    if hs[0] != 1:
        return "?"
    if len(hs) < 4 + int.from_bytes(hs[1:4], "big"):
        return None
    try:
        p = 4 + 2 + 32  # type+length, legacy_version, random
        p += 1 + hs[p]  # session id
        p += 2 + int.from_bytes(hs[p:p + 2], "big")  # cipher suites
        p += 1 + hs[p]  # compression methods
        end = p + 2 + int.from_bytes(hs[p:p + 2], "big")
        p += 2
        while p + 4 <= end:
            t, n = int.from_bytes(hs[p:p + 2], "big"), int.from_bytes(hs[p + 2:p + 4], "big")
            if t == 16:  # application_layer_protocol_negotiation
                d, q, protos = hs[p + 4:p + 4 + n], 2, []
                while q < len(d):
                    protos.append(d[q + 1:q + 1 + d[q]].decode("ascii", "replace"))
                    q += 1 + d[q]
                return ",".join(protos)
            p += 4 + n
        return "-"
    except IndexError:
        return "?"


async def pipe(reader, writer, key, sniff=None):
    hello, done = b"", sniff is None
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            C[key] += len(data)
            if not done:
                hello += data
                offer = alpn_offer(hello)
                if offer is None and len(hello) > 65536:
                    offer = "?"
                if offer is not None:
                    C["alpn"][offer] = C["alpn"].get(offer, 0) + 1
                    done, hello = True, b""
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass
    finally:
        if not done:
            C["alpn"]["?"] = C["alpn"].get("?", 0) + 1


async def handle(creader, cwriter, host, port):
    C["opened"] += 1
    try:
        sreader, swriter = await asyncio.open_connection(host, port)
    except OSError:
        C["closed"] += 1
        cwriter.close()
        return
    for w in (cwriter, swriter):
        s = w.get_extra_info("socket")
        if s is not None:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        await asyncio.gather(pipe(creader, swriter, "up", sniff=True), pipe(sreader, cwriter, "down"))
    finally:
        C["closed"] += 1
        for w in (cwriter, swriter):
            w.close()


def dump(path):
    C["time"] = time.time()
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(C, f)
    os.replace(tmp, path)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--stats", required=True)
    a = ap.parse_args()
    host, port = a.target.rsplit(":", 1)
    server = await asyncio.start_server(lambda r, w: handle(r, w, host, int(port)), "127.0.0.1", 0)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def usr1():
        C["dumps"] += 1
        dump(a.stats)

    loop.add_signal_handler(signal.SIGUSR1, usr1)
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    dump(a.stats)
    with open(f"{a.port_file}.tmp", "w") as f:
        f.write(str(server.sockets[0].getsockname()[1]))
    os.replace(f"{a.port_file}.tmp", a.port_file)
    await stop.wait()
    dump(a.stats)
    os._exit(0)  # the open connections with it, without asyncio's cancellation noise


if __name__ == "__main__":
    asyncio.run(main())
