#!/usr/bin/env python3
# bench-exporter.py PORT PID: 100 scrapes per second for 10 s from one paced
# client against erdma-stat --serve on 127.0.0.1:PORT (process PID); prints the
# latency percentiles and the exporter's RSS before and after (after 50
# warm-up scrapes). Numbers: docs/perf/2026-12-05-exporter.md.
# Exit status: 0 done, 1 an answer was not 200 (AssertionError).
import socket, sys, time
addr = ("127.0.0.1", int(sys.argv[1])); pid = sys.argv[2]
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1])
def scrape():
    s = socket.create_connection(addr, timeout=10)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    b = b""
    while True:
        d = s.recv(65536)
        if not d: break
        b += d
    s.close()
    return b
for _ in range(50): scrape()
r0 = rss(); lat = []; size = 0; t0 = time.monotonic()
for i in range(1000):
    due = t0 + i * 0.01
    now = time.monotonic()
    if due > now: time.sleep(due - now)
    a = time.monotonic(); b = scrape(); lat.append(time.monotonic() - a)
    assert b.startswith(b"HTTP/1.1 200"), b[:40]
    size = len(b)
el = time.monotonic() - t0; r1 = rss(); lat.sort()
p = lambda q: lat[int(q * (len(lat) - 1))] * 1e3
print(f"1000 scrapes in {el:.1f} s, {size} bytes each; latency ms p50 {p(.5):.2f} p90 {p(.9):.2f} p99 {p(.99):.2f} max {lat[-1]*1e3:.2f}; RSS {r0} KiB -> {r1} KiB")
