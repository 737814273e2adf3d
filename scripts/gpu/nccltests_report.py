#!/usr/bin/env python3
"""Reads nccl-tests reports - NVIDIA's all_reduce_perf and ours alike, with
one parser - and checks or compares them.

  nccltests_report.py check REPORT [--wrong zero|na|zero-or-na-in-place]
                                    [--rows N] [--skipped N]
                                    [--contains TEXT ...] [--json FILE] [--csv FILE]
                                    [--mem BUFFER_BYTES [--mem-parallel-init]]
      Validates one run's stdout: every row parses, #wrong is 0 (or N/A), the
      footer says "Out of bounds values : 0 OK"; optionally the row count, the
      number of "# Skipping" lines, texts that must appear, and a -J JSON file
      (schema 3, one result per row) or a --csv file (two lines per row).
      --mem checks the -M 1 line on a GPU: exactly Initialization,
      User-Allocated, Collective and Total, Total their sum, Initialization
      above 0 (communicators take device memory), the buffers (BUFFER_BYTES:
      send + receive, or more with allocation granularity, at most twice)
      counted as User-Allocated, or with --mem-parallel-init as
      Initialization (nccl-tests' -p 1 reads free memory only after them),
      and Collective not negative.
  nccltests_report.py compare --theirs A.txt ... --ours B.txt ... [--bound 0.02]
                              [--split BYTES]
      Per size and placement: median time over the runs of each tool, the
      ratio ours/theirs and whether it is within the bound. Prints a Markdown
      table, then each tool's run-to-run spread below and from --split (16 MiB)
      with the overall ratio and its uncertainty; exits 1 when a size is
      outside the bound.
  nccltests_report.py run --tsv FILE --label LABEL --out OUTPUT -- COMMAND ...
      Runs COMMAND with its stdout and stderr in OUTPUT, and appends a line
      "LABEL, exit status, wall seconds, peak RSS (KiB)" (tab-separated) to
      FILE. The peak RSS is the largest of COMMAND's process tree (wait4 of a
      launcher reports its children's too). Exits with COMMAND's status.
  nccltests_report.py walls FILE
      From a run FILE whose labels are "COLL CASE TOOL N": per collective and
      case, the median wall time and peak RSS of each tool (nccl-tests,
      ours), their ratios, and nccl-tests' own spread (max/min over its runs),
      as a Markdown table.
  nccltests_report.py busbw LABEL=REPORT ... [--placement oop|ip]
      Bus bandwidth (GB/s) per size, one column per report, as a Markdown
      table, and each report's "Avg bus bandwidth" as the last row. Missing
      files or sizes show as "-" (a failed run still gets its column).

Exit status: 0 good, 1 a check failed, 2 unreadable input.
"""

import argparse
import csv
import json
import math
import statistics
import sys


def parse(text):
    """Data rows of a report as dicts. Lines starting with '#' are comments
    (header, footer, skips); rows have size, count, type, redop (empty for
    hypercube), root, then per placement time, algbw, busbw, #wrong (and four
    per-iteration columns with -I)."""
    per_iter = any(l.startswith("#") and "i_min" in l for l in text.splitlines())
    width = 8 if per_iter else 4
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#") or line.startswith(" .."):
            continue
        f = line.split()
        if len(f) < 4 or not f[0].isdigit() or not f[1].isdigit():
            continue
        if f[3].lstrip("-").isdigit():  # empty redop column
            f.insert(3, "")
        rest = f[5:]
        if len(rest) < 2 * width:
            raise ValueError(f"short row: {line!r}")

        def placement(cols):
            return {
                "time": float(cols[0]),
                "algbw": float(cols[1]),
                "busbw": float(cols[2]),
                "wrong": cols[3],
            }

        rows.append(
            {
                "size": int(f[0]),
                "count": int(f[1]),
                "type": f[2],
                "redop": f[3],
                "root": int(f[4]),
                "oop": placement(rest[0:4]),
                "ip": placement(rest[width : width + 4]),
            }
        )
    return rows


def footer(text):
    """(out-of-bounds count, verdict) and the average bus bandwidth."""
    oob, avg = None, None
    for line in text.splitlines():
        if line.startswith("# Out of bounds values"):
            v = line.split(":", 1)[1].split()
            oob = (int(v[0]), v[1] if len(v) > 1 else "")
        if line.startswith("# Avg bus bandwidth"):
            avg = line.split(":", 1)[1].split()[0]
    return oob, avg


def cmd_check(a):
    text = open(a.report, errors="replace").read()
    problems = []
    try:
        rows = parse(text)
    except ValueError as e:
        print(f"FAIL {a.report}: {e}")
        return 1
    if not rows:
        problems.append("no rows")
    for r in rows:
        for p in ("oop", "ip"):
            w = r[p]["wrong"]
            if a.wrong == "na":
                ok = w == "N/A"
            elif a.wrong == "zero-or-na-in-place":
                ok = w == "0" or (p == "ip" and w == "N/A")
            else:
                ok = w == "0"
            if not ok:
                problems.append(f"#wrong {w} at {r['size']} {r['type']} {r['redop']} {p}")
                break
    avg = None
    if not a.partial:
        oob, avg = footer(text)
        if oob != (0, "OK"):
            problems.append(f"footer out of bounds {oob}")
    if a.rows is not None and len(rows) != a.rows:
        problems.append(f"{len(rows)} rows, expected {a.rows}")
    skipped = sum(1 for l in text.splitlines() if l.startswith("# Skipping "))
    if a.skipped is not None and skipped != a.skipped:
        problems.append(f"{skipped} skipped pairs, expected {a.skipped}")
    for t in a.contains or []:
        if t not in text:
            problems.append(f"missing {t!r}")
    if a.json:
        problems += check_json(a.json, rows)
    if a.csv:
        problems += check_csv(a.csv, rows)
    if a.mem is not None:
        problems += check_mem(text, a.mem, a.mem_parallel_init)
    verdict = "FAIL" if problems else "ok"
    print(
        f"{verdict}: {len(rows)} rows, {skipped} skipped, avg busbw {avg}"
        + ("; " + "; ".join(problems[:5]) if problems else "")
    )
    return 1 if problems else 0


MEM_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
MEM_NAMES = ["Initialization", "User-Allocated", "Collective", "Total"]


def mem_report(text):
    """The -M 1 line as [(name, bytes, shown text)], or an error string."""
    lines = [l for l in text.splitlines() if l.startswith("# GPU memory usage")]
    if len(lines) != 1:
        return f"{len(lines)} '# GPU memory usage' lines, expected 1"
    items = []
    for part in lines[0].split(":", 1)[1].split("|"):
        f = part.split()
        if len(f) != 3 or f[2] not in MEM_UNITS:
            return f"unreadable memory item {part.strip()!r}"
        try:
            items.append((f[0], float(f[1]) * MEM_UNITS[f[2]], f"{f[1]} {f[2]}"))
        except ValueError:
            return f"unreadable memory amount {part.strip()!r}"
    if [i[0] for i in items] != MEM_NAMES:
        return f"memory items {[i[0] for i in items]}, expected {MEM_NAMES}"
    return items


def check_mem(text, buffers, parallel_init):
    items = mem_report(text)
    if isinstance(items, str):
        return [items]
    (_, init, ti), (_, user, tu), (_, coll, tc), (_, total, tt) = items
    problems = []
    # Each amount is shown with 3 significant digits at most: 1% slack.
    if abs(total - (init + user + coll)) > 0.01 * max(total, 1) + 0.01 * (init + user + abs(coll)):
        problems.append(f"Total {tt} is not {ti} + {tu} + {tc}")
    if parallel_init:
        # nccl-tests' threadInit: communicators and buffers, then registration.
        if init <= buffers:
            problems.append(f"Initialization {ti} does not hold communicators and {buffers} B of buffers")
        if user != 0:
            problems.append(f"User-Allocated {tu} with -p 1 and no -R: expected 0 (registration only)")
    else:
        if init <= 0:
            problems.append(f"Initialization {ti}: communicators take device memory")
        if not buffers * 0.99 <= user <= 2 * buffers:
            problems.append(f"User-Allocated {tu} is not the {buffers} B of buffers")
    if coll < 0:
        problems.append(f"Collective {tc} is negative")
    return problems


def check_json(path, rows):
    try:
        j = json.load(open(path))
    except (OSError, ValueError) as e:
        return [f"JSON {path}: {e}"]
    p = []
    if j.get("version") != 3:
        p.append(f"JSON version {j.get('version')}")
    for k in ("start_time", "args", "env", "nccl_version", "config", "results",
              "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"):
        if k not in j:
            p.append(f"JSON lacks {k}")
    res = j.get("results", [])
    if len(res) != len(rows):
        p.append(f"JSON has {len(res)} results for {len(rows)} rows")
    for r, row in zip(res, rows):
        if r.get("size") != row["size"] or r.get("type") != row["type"]:
            p.append(f"JSON result {r.get('size')} {r.get('type')} != row {row['size']}")
            break
        t = r.get("out_of_place", {}).get("time")
        if t is None or abs(t - row["oop"]["time"]) > max(0.01, 0.01 * row["oop"]["time"]):
            p.append(f"JSON time {t} != row {row['oop']['time']} at {row['size']}")
            break
    if j.get("out_of_bounds", {}).get("okay") != "true":
        p.append(f"JSON out_of_bounds {j.get('out_of_bounds')}")
    return p


def check_csv(path, rows):
    try:
        lines = list(csv.DictReader(open(path, newline="")))
    except (OSError, csv.Error) as e:
        return [f"CSV {path}: {e}"]
    if len(lines) != 2 * len(rows):
        return [f"CSV has {len(lines)} lines for {len(rows)} rows"]
    return []


def cmd_compare(a):
    def load(paths):
        runs = []
        for path in paths:
            rows = parse(open(path, errors="replace").read())
            runs.append({(r["size"], r["type"], r["redop"], r["root"]): r for r in rows})
        return runs

    theirs, ours = load(a.theirs), load(a.ours)
    keys = sorted(set().union(*[r.keys() for r in theirs + ours]))
    out = []
    worst = 0.0
    failed = []
    out.append(f"{len(theirs)} nccl-tests runs, {len(ours)} runs of ours; median time per op (us); "
               f"ratio = ours / nccl-tests; bound {a.bound:.0%}")
    out.append("")
    out.append("| size (B) | nccl-tests oop | ours oop | ratio | | nccl-tests ip | ours ip | ratio | |")
    out.append("|---:|---:|---:|---:|:-:|---:|---:|---:|:-:|")
    for k in keys:
        cells = [str(k[0])]
        for p in ("oop", "ip"):
            t = [r[k][p]["time"] for r in theirs if k in r]
            o = [r[k][p]["time"] for r in ours if k in r]
            if not t or not o:
                cells += ["-", "-", "-", "missing"]
                failed.append((k[0], p))
                continue
            mt, mo = statistics.median(t), statistics.median(o)
            ratio = mo / mt if mt > 0 else float("inf")
            ok = abs(ratio - 1) <= a.bound
            worst = max(worst, abs(ratio - 1))
            if not ok:
                failed.append((k[0], p))
            cells += [f"{mt:.2f}", f"{mo:.2f}", f"{ratio:.3f}", "pass" if ok else "FAIL"]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    for lo, hi, what in ((0, a.split, f"below {a.split} B"), (a.split, 1 << 62, f"from {a.split} B")):
        for p in ("oop", "ip"):
            rs = []
            for k in keys:
                if not lo <= k[0] < hi:
                    continue
                t = [r[k][p]["time"] for r in theirs if k in r]
                o = [r[k][p]["time"] for r in ours if k in r]
                if t and o and statistics.median(t) > 0 and statistics.median(o) > 0:
                    rs.append(statistics.median(o) / statistics.median(t))
            if rs:
                g = math.exp(sum(math.log(x) for x in rs) / len(rs))
                out.append(f"geometric mean of the ratios, {what}, {p}: {g:.3f} over {len(rs)} sizes "
                           f"(range {min(rs):.3f}-{max(rs):.3f})")
    out.append("")
    out.append(f"worst deviation {worst:.1%}; outside the bound: "
               + (", ".join(f"{s} {p}" for s, p in failed) if failed else "none"))
    out.append("")
    small = [k for k in keys if k[0] < a.split]
    large = [k for k in keys if k[0] >= a.split]
    out += run_levels(theirs, ours, small, f"sizes below {a.split} B")
    out += run_levels(theirs, ours, large, f"sizes from {a.split} B")
    out += mode_matched(theirs, ours, small, a.bound)
    out += self_check(theirs, keys, a.bound)
    print("\n".join(out))
    return 1 if failed else 0


def self_check(theirs, keys, bound):
    """The resolution of this comparison: nccl-tests against itself (its odd
    runs against its even runs, per-size medians), which no tool can beat."""
    a, b = theirs[0::2], theirs[1::2]
    if len(a) < 2 or len(b) < 2:
        return []
    worst, outside = 0.0, 0
    for k in keys:
        for p in ("oop", "ip"):
            ta = [r[k][p]["time"] for r in a if k in r]
            tb = [r[k][p]["time"] for r in b if k in r]
            if not ta or not tb or statistics.median(ta) <= 0:
                continue
            d = abs(statistics.median(tb) / statistics.median(ta) - 1)
            worst = max(worst, d)
            outside += d > bound
    return ["", f"resolution: nccl-tests' even runs against its odd runs ({len(b)} vs {len(a)}), "
            f"worst per-size deviation {worst:.1%}, {outside} size/placement cells outside {bound:.0%}"]


def levels(runs, pool, keys, p):
    """Each run's level: geometric mean over `keys` of its time / the median
    of `pool` (all runs of both tools) at that size."""
    med = {}
    for k in keys:
        v = [r[k][p]["time"] for r in pool if k in r]
        med[k] = statistics.median(v) if v else 0.0
    out = []
    for run in runs:
        xs = [run[k][p]["time"] / med[k] for k in keys
              if k in run and med[k] > 0 and run[k][p]["time"] > 0]
        out.append(statistics.geometric_mean(xs) if xs else float("nan"))
    return out


def two_modes(values):
    """1-D 2-means on log values: (threshold, separation in pooled standard
    deviations, ratio of the cluster means), or None when fewer than 3 values
    fall in either cluster."""
    xs = sorted(math.log(v) for v in values if v > 0 and not math.isnan(v))
    if len(xs) < 6:
        return None
    cut = (xs[0] + xs[-1]) / 2
    for _ in range(100):
        lo, hi = [x for x in xs if x < cut], [x for x in xs if x >= cut]
        if len(lo) < 3 or len(hi) < 3:
            return None
        new = (statistics.mean(lo) + statistics.mean(hi)) / 2
        if new == cut:
            break
        cut = new
    sd = ((statistics.pvariance(lo) * len(lo) + statistics.pvariance(hi) * len(hi)) / len(xs)) ** 0.5
    sep = (statistics.mean(hi) - statistics.mean(lo)) / sd if sd > 0 else float("inf")
    return math.exp(cut), sep, math.exp(statistics.mean(hi) - statistics.mean(lo))


def mode_matched(theirs, ours, keys, bound):
    """Host-bound sizes: a process lands in a fast or a slow state for all its
    sizes (seen on the H200 for both tools alike, whatever the CPU pinning), so
    per-size medians over all runs measure how many runs of each tool landed
    in each state. When the runs are bimodal, compare within each state, and
    test whether the tools land in the states at different rates."""
    if not keys:
        return []
    pool = theirs + ours
    lt, lo = levels(theirs, pool, keys, "oop"), levels(ours, pool, keys, "oop")
    modes = two_modes(lt + lo)
    # Two clusters cut out of one normal distribution lie 2.65 sd apart; a
    # state that costs under 5% is noise for this purpose.
    if modes is None or modes[1] < 3.3 or modes[2] < 1.05:
        return ["", "mode-matched: the host-bound runs are not bimodal (or too few runs); "
                "the medians above stand"]
    cut, sep, gap = modes
    out = ["", f"mode-matched (host-bound sizes): runs split at level {cut:.3f} "
           f"(the slow mode {gap - 1:.0%} slower, {sep:.1f} pooled sd apart)"]
    ft = [r for r, v in zip(theirs, lt) if v < cut]
    fo = [r for r, v in zip(ours, lo) if v < cut]
    st_, so_ = [r for r, v in zip(theirs, lt) if v >= cut], [r for r, v in zip(ours, lo) if v >= cut]
    nt, no = len(theirs), len(ours)
    pt, po = len(ft) / nt, len(fo) / no
    pp = (len(ft) + len(fo)) / (nt + no)
    se = (pp * (1 - pp) * (1 / nt + 1 / no)) ** 0.5
    z = (po - pt) / se if se > 0 else 0.0
    out.append(f"- runs in the fast mode: nccl-tests {len(ft)}/{nt}, ours {len(fo)}/{no} "
               f"(two-proportion z = {z:+.2f}; |z| > 2 would mean one tool lands there more often)")
    for name, t, o in (("fast", ft, fo), ("slow", st_, so_)):
        if len(t) < 3 or len(o) < 3:
            out.append(f"- {name} mode: fewer than 3 runs of a tool, not compared")
            continue
        ratios, worst, outside = [], 0.0, []
        for k in keys:
            for p in ("oop", "ip"):
                mt = statistics.median(r[k][p]["time"] for r in t if k in r)
                mo = statistics.median(r[k][p]["time"] for r in o if k in r)
                if mt <= 0 or mo <= 0:
                    continue
                ratios.append(mo / mt)
                worst = max(worst, abs(mo / mt - 1))
                if abs(mo / mt - 1) > bound:
                    outside.append(f"{k[0]} {p}")
        g = statistics.geometric_mean(ratios) if ratios else float("nan")
        out.append(f"- {name} mode ({len(t)} + {len(o)} runs): per-size median ratio "
                   f"ours/nccl-tests, geometric mean {g:.3f}, worst deviation {worst:.1%}; "
                   f"outside {bound:.0%}: " + (", ".join(outside) if outside else "none"))
    return out


def cmd_busbw(a):
    cols = []
    for spec in a.reports:
        label, _, path = spec.partition("=")
        if not path:
            print(f"busbw: expected LABEL=REPORT, got {spec!r}")
            return 2
        try:
            text = open(path, errors="replace").read()
            rows, avg = parse(text), footer(text)[1]
        except (OSError, ValueError):
            rows, avg = [], None
        # The first row of each size (a -d/-o/-r sweep has several).
        per_size = {}
        for r in rows:
            per_size.setdefault(r["size"], r[a.placement]["busbw"])
        cols.append((label, per_size, avg))
    sizes = sorted(set().union(*[c[1].keys() for c in cols])) if cols else []
    name = "out-of-place" if a.placement == "oop" else "in-place"
    print(f"{name} busbw (GB/s)")
    print("")
    print("| size (B) | " + " | ".join(c[0] for c in cols) + " |")
    print("|---:|" + "---:|" * len(cols))
    for s in sizes:
        cells = [f"{c[1][s]:.2f}" if s in c[1] else "-" for c in cols]
        print(f"| {s} | " + " | ".join(cells) + " |")
    print("| avg | " + " | ".join(c[2] or "-" for c in cols) + " |")
    return 0


def run_levels(theirs, ours, keys, what):
    """Run-to-run spread: each run's level is the geometric mean over sizes of
    its time divided by that size's median over all runs of both tools. The
    per-size medians of one session move together (a slow process is slow at
    every size), so this shows whether a difference exceeds the noise."""
    if not keys:
        return []
    lines = [f"run level, {what} (geometric mean over sizes of time / median of both "
             "tools), mean +- sd over runs; ours/nccl-tests +- 2 standard errors:"]
    for p, name in (("oop", "out-of-place"), ("ip", "in-place")):
        pool = theirs + ours
        lt, lo = levels(theirs, pool, keys, p), levels(ours, pool, keys, p)
        if len(lt) < 2 or len(lo) < 2:
            continue
        mt, mo = statistics.mean(lt), statistics.mean(lo)
        st, so = statistics.stdev(lt), statistics.stdev(lo)
        se = (st * st / len(lt) + so * so / len(lo)) ** 0.5 / mt
        lines.append(f"- {name}: nccl-tests {mt:.3f} +- {st:.3f} ({len(lt)} runs), "
                     f"ours {mo:.3f} +- {so:.3f} ({len(lo)} runs); ratio {mo / mt:.3f} +- {2 * se:.3f}")
    return lines


def cmd_run(a):
    import os
    import subprocess
    import time
    cmd = a.command[1:] if a.command and a.command[0] == "--" else a.command
    with open(a.out, "w") as out:
        start = time.monotonic()
        try:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        except OSError as e:
            out.write(f"cannot run {cmd[0]}: {e}\n")
            rc, rss, wall = 127, 0, 0.0
        else:
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.monotonic() - start
            rc = os.waitstatus_to_exitcode(status)
            rss = ru.ru_maxrss
    with open(a.tsv, "a") as t:
        t.write(f"{a.label}\t{rc}\t{wall:.3f}\t{rss}\n")
    return rc if 0 <= rc < 256 else 1


def cmd_walls(a):
    cases = {}
    for line in open(a.tsv):
        f = line.rstrip("\n").split("\t")
        if len(f) != 4:
            continue
        label, rc, wall, rss = f
        w = label.split()
        if len(w) != 4:
            continue
        coll, case, tool, _ = w
        cases.setdefault((coll, case), {}).setdefault(tool, []).append((int(rc), float(wall), int(rss)))
    out = ["| collective | case | runs | nccl-tests wall (s) | ours wall (s) | ratio | nccl-tests max/min | "
           "nccl-tests peak RSS (MiB) | ours peak RSS (MiB) | ratio | failed runs |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (coll, case), tools in cases.items():
        t, o = tools.get("nccl-tests", []), tools.get("ours", [])
        if not t or not o:
            out.append(f"| {coll} | {case} | - | - | - | - | - | - | - | - | missing |")
            continue
        tw, ow = statistics.median(x[1] for x in t), statistics.median(x[1] for x in o)
        tr, orr = statistics.median(x[2] for x in t), statistics.median(x[2] for x in o)
        spread = max(x[1] for x in t) / max(min(x[1] for x in t), 1e-9)
        bad = [f"{tool} exit {x[0]}" for tool, runs in (("nccl-tests", t), ("ours", o)) for x in runs if x[0] != 0]
        out.append(f"| {coll} | {case} | {len(t)}+{len(o)} | {tw:.2f} | {ow:.2f} | {ow / tw:.3f} | {spread:.3f} | "
                   f"{tr / 1024:.0f} | {orr / 1024:.0f} | {orr / tr:.3f} | {', '.join(bad) or 'none'} |")
    print("\n".join(out))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("report")
    c.add_argument("--wrong", choices=["zero", "na", "zero-or-na-in-place"], default="zero")
    c.add_argument("--rows", type=int)
    c.add_argument("--partial", action="store_true", help="a run that stopped early: no footer")
    c.add_argument("--skipped", type=int)
    c.add_argument("--contains", action="append")
    c.add_argument("--json")
    c.add_argument("--csv")
    c.add_argument("--mem", type=int, metavar="BUFFER_BYTES")
    c.add_argument("--mem-parallel-init", action="store_true")
    m = sub.add_parser("compare")
    m.add_argument("--theirs", nargs="+", required=True)
    m.add_argument("--ours", nargs="+", required=True)
    m.add_argument("--bound", type=float, default=0.02)
    m.add_argument("--split", type=int, default=16 << 20,
                   help="run levels are given below and from this size (bytes)")
    r = sub.add_parser("run")
    r.add_argument("--tsv", required=True)
    r.add_argument("--label", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("command", nargs=argparse.REMAINDER)
    w = sub.add_parser("walls")
    w.add_argument("tsv")
    b = sub.add_parser("busbw")
    b.add_argument("reports", nargs="+", metavar="LABEL=REPORT")
    b.add_argument("--placement", choices=["oop", "ip"], default="oop")
    a = ap.parse_args()
    try:
        cmds = {"check": cmd_check, "compare": cmd_compare, "busbw": cmd_busbw,
                "run": cmd_run, "walls": cmd_walls}
        return cmds[a.cmd](a)
    except OSError as e:
        print(f"cannot read: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
