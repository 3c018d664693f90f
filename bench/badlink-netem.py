#!/usr/bin/env python3
"""netem in user space, for kernels built without sch_netem (bench/badlink.sh).

  badlink-netem.py offload-off IFACE...      checksums, scatter-gather, TSO, GSO, GRO
                                            off: frames as a real link carries them
  badlink-netem.py forward IF_A IF_B --delay MS --jitter MS --loss PCT --rate KBIT
                   [--limit N] [--stats FILE]

`forward` bridges two interfaces frame by frame (AF_PACKET): each way as one
netem qdisc does on egress (net/sched/sch_netem.c): a frame is lost with
probability loss; else it waits delay ± jitter (uniform, netem's default
without a distribution table), then its time on the wire at rate (its length
with the Ethernet header), and never leaves before the frame ahead of it (with
a rate netem keeps the order: a frame's time is max(the last one's, now +
delay) + its transmit time); at most `limit` frames queued (netem's default
1000), more are dropped. Counts go to FILE (JSON) every 5 s and at the end.
"""
import argparse, collections, ctypes, fcntl, json, os, random, select, signal, socket, struct, sys, time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SIOCETHTOOL = 0x8946
# ethtool_value commands (linux/ethtool.h): set TX checksum, SG, TSO, GSO, GRO.
ETHTOOL_SET = {"tx-checksum": 0x17, "sg": 0x19, "tso": 0x1F, "gso": 0x24, "gro": 0x2C}


def offload_off(ifaces):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for name in ifaces:
        for what, cmd in ETHTOOL_SET.items():
            buf = ctypes.create_string_buffer(struct.pack("II", cmd, 0))
            ifr = struct.pack("16sP16x", name.encode(), ctypes.addressof(buf))
            try:
                fcntl.ioctl(s, SIOCETHTOOL, ifr)
            except OSError as e:
                sys.exit(f"badlink-netem: {name}: {what} off: {e}")


def forward(a):
    socks = {}
    for name in (a.if_a, a.if_b):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
        s.bind((name, ETH_P_ALL))
        s.setblocking(False)
        socks[name] = s
    other = {a.if_a: a.if_b, a.if_b: a.if_a}
    ways = {a.if_a: f"{a.if_a}→{a.if_b}", a.if_b: f"{a.if_b}→{a.if_a}"}
    queue = {n: collections.deque() for n in socks}  # by the interface it leaves by
    stats = {w: collections.Counter() for w in ways.values()}
    delay, jitter, loss = a.delay / 1000, a.jitter / 1000, a.loss / 100
    bytes_per_s = a.rate * 1000 / 8
    done = []
    signal.signal(signal.SIGTERM, lambda *_: done.append(1))
    signal.signal(signal.SIGINT, lambda *_: done.append(1))

    def dump():
        if a.stats:
            with open(a.stats + ".tmp", "w") as f:
                json.dump({"args": vars(a), "ways": stats}, f)
            os.replace(a.stats + ".tmp", a.stats)

    next_dump = time.monotonic() + 5
    while not done:
        now = time.monotonic()
        due = [q[0][0] for q in queue.values() if q]
        timeout = max(0.0, min(due + [next_dump]) - now)
        try:
            ready, _, _ = select.select(list(socks.values()), [], [], timeout)
        except InterruptedError:
            continue
        for s in ready:
            src = s.getsockname()[0]
            out, st = other[src], stats[ways[src]]
            while True:
                try:
                    frame, addr = s.recvfrom(65536)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING:
                    continue  # what this sends out of it
                now = time.monotonic()
                st["frames_in"] += 1
                st["bytes_in"] += len(frame)
                st["max_frame"] = max(st["max_frame"], len(frame))
                q = queue[out]
                if random.random() < loss:
                    st["lost"] += 1
                    continue
                if len(q) >= a.limit:
                    st["overflow"] += 1
                    continue
                at = now + delay + random.uniform(-jitter, jitter)
                if q:
                    at = max(at, q[-1][0])
                q.append((at + len(frame) / bytes_per_s, frame))
                st["max_queue"] = max(st["max_queue"], len(q))
        now = time.monotonic()
        for out, q in queue.items():
            st = stats[ways[other[out]]]
            while q and q[0][0] <= now:
                _, frame = q.popleft()
                try:
                    socks[out].send(frame)
                    st["frames_out"] += 1
                    st["bytes_out"] += len(frame)
                except OSError:
                    st["send_errors"] += 1
        if now >= next_dump:
            dump()
            next_dump = now + 5
    dump()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("offload-off")
    o.add_argument("ifaces", nargs="+")
    f = sub.add_parser("forward")
    f.add_argument("if_a")
    f.add_argument("if_b")
    f.add_argument("--delay", type=float, required=True)
    f.add_argument("--jitter", type=float, default=0)
    f.add_argument("--loss", type=float, default=0)
    f.add_argument("--rate", type=float, required=True, help="kbit/s")
    f.add_argument("--limit", type=int, default=1000)
    f.add_argument("--stats")
    a = p.parse_args()
    offload_off(a.ifaces) if a.cmd == "offload-off" else forward(a)


if __name__ == "__main__":
    main()
