#!/usr/bin/env python3
"""Writes the hand-made nccl-tests logs of this directory (run from it).

The layouts are nccl-tests' printf formats, copied from its sources:
- nccl-tests-2.11-all_reduce_perf.txt: v2.11.0 (src/common.cu, src/all_reduce.cu):
  no collective name, `#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s` device
  lines, columns size/count/type/redop and per half time/algbw/busbw/error, the error
  being the maximum deviation printed `%5.0le`. Two runs of the test concatenated.
- nccl-tests-16ranks-info.txt: 2.19.6 layout (src/util.cu), 2 hosts x 8 GPUs under
  mpirun with NCCL_DEBUG=INFO: every rank's INFO lines interleaved, and NCCL's lazily
  connected channels logging in the middle of the first rows.
The numbers are made up but consistent (busbw = algbw * 2(n-1)/n for all_reduce).
"""

def old_row(size, t_oop, t_ip, n):
    def half(t):
        alg = size / t / 1e3
        bus = alg * 2 * (n - 1) / n
        ts = "%7.0f" % t if t >= 10000 else ("%7.1f" % t if t >= 100 else "%7.2f" % t)
        return "  %7s  %6.2f  %6.2f  %5.0e" % (ts, alg, bus, 0.0)
    return "%12li  %12li  %8s  %6s" % (size, size // 4, "float", "sum") + half(t_oop) + half(t_ip)


def old_log():
    out = []
    for run, scale in ((1, 1.0), (2, 1.08)):
        out.append("# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 4(factor) warmup iters: 5 iters: 20 validation: 1 ")
        out.append("#")
        out.append("# Using devices")
        for r in range(8):
            out.append("#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s" % (r, 4711, "dgx-a100", r, [0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd][r], "A100-SXM4-80GB"))
        out.append("#")
        out.append("# %10s  %12s  %8s  %6s            out-of-place                       in-place          " % ("", "", "", ""))
        out.append("# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s" % ("size", "count", "type", "redop", "time", "algbw", "busbw", "error", "time", "algbw", "busbw", "error"))
        out.append("# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s" % ("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""))
        size = 8
        while size <= 134217728:
            t = (24.0 + size / 230e3) * scale
            out.append(old_row(size, t, t * 0.98, 8))
            size *= 4
        out.append("# Out of bounds values : 0 OK")
        out.append("# Avg bus bandwidth    : %g " % (61.4 / scale))
        out.append("#")
        out.append("")
    return "\n".join(out)


def info(host, pid, tid, dev, msg):
    return "%s:%d:%d [%d] NCCL INFO %s" % (host, pid, tid, dev, msg)


def new_row_start(size, n):
    return "%12li  %12li  %8s  %6s  %6s" % (size, size // 4, "float", "sum", "%6i" % -1)


def new_half(size, t, n):
    alg = size / t / 1e3
    bus = alg * 2 * (n - 1) / n
    ts = "%7.0f" % t if t >= 10000 else ("%7.1f" % t if t >= 100 else "%7.2f" % t)
    return "  %7s  %6.2f  %6.2f  %6g" % (ts, alg, bus, 0)


def info_log():
    n = 16
    ranks = [("node1", 20001 + r, r) for r in range(8)] + [("node2", 30001 + r, r) for r in range(8)]
    out = ["Warning: Permanently added 'node2' (ED25519) to the list of known hosts."]
    out.append("# nccl-tests version 2.19.6 nccl-headers=22304 nccl-library=22304")
    out.append("# Collective test starting: all_reduce_perf")
    out.append("# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0")
    out.append("#")
    out.append("# Using devices")
    for r, (h, pid, dev) in enumerate(ranks):
        out.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s" % (r, 0, pid, h, dev, 0, [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb][dev], 0, "NVIDIA H100 80GB HBM3"))
    # Every rank initialises NCCL; the lines of different ranks interleave.
    steps = [
        lambda h, p, d, r: info(h, p, p, d, "Bootstrap : Using eth0:10.0.%d.1<0>" % (1 if h == "node1" else 2)),
        lambda h, p, d, r: info(h, p, p, d, "cudaDriverVersion 12040"),
        lambda h, p, d, r: info(h, p, p, d, "NCCL version 2.23.4+cuda12.6"),
        lambda h, p, d, r: info(h, p, p + 150, d, "NCCL_IB_HCA set by environment to erdma_0"),
        lambda h, p, d, r: info(h, p, p + 150, d, "NCCL_IB_GID_INDEX set by environment to 1."),
        lambda h, p, d, r: info(h, p, p + 150, d, "NET/IB : Using [0]erdma_0:1/RoCE [RO]; OOB eth0:10.0.%d.1<0>" % (1 if h == "node1" else 2)),
        lambda h, p, d, r: info(h, p, p + 150, d, "Using network IB"),
        lambda h, p, d, r: info(h, p, p + 150, d, "comm 0x55d0c0a0%02x rank %d nranks 16 cudaDev %d nvmlDev %d busId 18000 commId 0x7d2f1c3b5e8a9f01 - Init START" % (r, r, d, d)),
        lambda h, p, d, r: info(h, p, p + 150, d, "Connected all rings"),
        lambda h, p, d, r: info(h, p, p + 150, d, "comm 0x55d0c0a0%02x rank %d nranks 16 cudaDev %d nvmlDev %d busId 18000 commId 0x7d2f1c3b5e8a9f01 - Init COMPLETE" % (r, r, d, d)),
    ]
    for s in steps:
        order = list(range(n))
        order = order[5:] + order[:5] if s is steps[3] else order[::-1] if s is steps[6] else order
        for r in order:
            h, p, d = ranks[r]
            out.append(s(h, p, d, r))
    out.append("#")
    out.append("#                                                              out-of-place                       in-place          ")
    out.append("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ")
    out.append("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ")
    size = 8
    first = True
    while size <= 1073741824:
        t = 38.0 + size / 24e3
        start, oop, ip = new_row_start(size, n), new_half(size, t, n), new_half(size, t * 1.01, n)
        if first:
            # Channels connect on first use: rank 0 logs in the middle of
            # its row, other ranks log between the pieces.
            out.append(start + info("node1", 20001, 20001, 0, "Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA"))
            out.append(info("node2", 30004, 30004, 3, "Channel 00/0 : 11[3] -> 12[4] via P2P/CUMEM/read"))
            out.append(info("node1", 20001, 20001, 0, "Connected all rings, use ring PXN 0 GDR 1"))
            out.append(oop + ip)
            first = False
        elif size == 2048:
            out.append(start + oop + info("node2", 30001, 30001, 0, "Channel 01/0 : 7[7] -> 8[0] [receive] via NET/IB/0/GDRDMA"))
            out.append(ip)
        else:
            out.append(start + oop + ip)
        size *= 4
    out.append("# Out of bounds values : 0 OK")
    out.append("# Avg bus bandwidth    : 12.3456 ")
    out.append("#")
    out.append("# Collective test concluded: all_reduce_perf")
    out.append("#")
    for r in range(n):
        h, p, d = ranks[r]
        out.append(info(h, p, p, d, "comm 0x55d0c0a0%02x rank %d nranks 16 cudaDev %d busId 18000 - Destroy COMPLETE" % (r, r, d)))
    out.append("")
    return "\n".join(out)


open("nccl-tests-2.11-all_reduce_perf.txt", "w").write(old_log())
open("nccl-tests-16ranks-info.txt", "w").write(info_log())
