#!/usr/bin/env python3
"""Compares erdma-doctor's GPU health values (OUT/doctor.json) with nvidia-smi on the
same GPUs: OUT/smi-before.xml and OUT/smi-after.xml (nvidia-smi -q -x around the
doctor), OUT/nvlink-status-N.txt and nvlink-errors-N.txt (nvidia-smi nvlink -s / -e),
OUT/xid-count.txt (NVRM Xid lines in the kernel log). One line per value:
PASS/FAIL name: doctor vs nvidia-smi. Exit 0 only if every value agrees.
Usage: gpu_health_compare.py OUT"""

import json
import re
import sys
import xml.etree.ElementTree as ET

OUT = sys.argv[1]
failed = 0
passed = 0


def report(ok, name, ours, theirs):
    global failed, passed
    if ok:
        passed += 1
    else:
        failed += 1
    print(f"{'PASS' if ok else 'FAIL'}  {name}: doctor {ours!r} vs nvidia-smi {theirs!r}")


def text(el, *paths):
    """The text of the first path found under el, else None."""
    for p in paths:
        x = el.find(p)
        if x is not None and x.text is not None:
            return x.text.strip()
    return None


def number(s):
    """The leading number of '33 C', '700.00 W', '2560 bank(s)'; None for N/A."""
    if s is None:
        return None
    m = re.match(r"\s*(-?[0-9]+(?:\.[0-9]+)?)", s)
    return float(m.group(1)) if m else None


def flag(s):
    """Enabled/Yes/Active -> True, Disabled/No/Not Active -> False, else None."""
    if s is None:
        return None
    s = s.strip().lower()
    if s in ("enabled", "yes", "active"):
        return True
    if s in ("disabled", "no", "not active"):
        return False
    return None


def pci_key(addr):
    d, b, rest = addr.split(":")[:3]
    return (int(d, 16), int(b, 16), int(rest.split(".")[0], 16))


def exact(name, ours, theirs):
    """Equal, or both unavailable (None / N/A)."""
    report(ours == theirs, name, ours, theirs)


def between(name, ours, a, b, tol):
    if ours is None or a is None or b is None:
        report(ours is None and a is None and b is None, name, ours, (a, b))
        return
    lo, hi = min(a, b) - tol(a, b), max(a, b) + tol(a, b)
    report(lo <= ours <= hi, name, ours, f"{a}..{b} (+-{tol(a, b):g})")


doc = json.load(open(f"{OUT}/doctor.json"))
checks = {c["id"]: c for c in doc["checks"]}
before = ET.parse(f"{OUT}/smi-before.xml").getroot()
after = ET.parse(f"{OUT}/smi-after.xml").getroot()

count = checks["gpu.count"]
if not count["details"]:
    print(f"FAIL  gpu.count has no NVML view: {count['status']}: {count['found']}")
    sys.exit(1)
smi_gpus = {pci_key(g.get("id")): g for g in before.findall("gpu")}
smi_after = {pci_key(g.get("id")): g for g in after.findall("gpu")}
exact("gpu count", count["details"]["count"], int(text(before, "attached_gpus") or -1))
exact("driver version", count["details"]["driver_version"], text(before, "driver_version"))


def per_gpu(check):
    d = checks[check]["details"]
    return {g["index"]: g for g in (d or {}).get("gpus", [])}


ecc, remap, nvl, clk, temp, pwr, pers = (
    per_gpu(c)
    for c in (
        "gpu.ecc", "gpu.remap", "gpu.nvlink", "gpu.clocks", "gpu.temperature", "gpu.power",
        "gpu.persistence",
    )
)
REASONS = [
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clocks_setting"),
]

for g in count["details"]["gpus"]:
    i = g["index"]
    if not g["pci"]:
        report(False, f"GPU {i} readable", g.get("lost"), "a GPU")
        continue
    key = pci_key(g["pci"])
    s, s2 = smi_gpus.get(key), smi_after.get(key)
    tag = f"GPU {i} ({g['pci']})"
    if s is None:
        report(False, f"{tag} present", g["pci"], sorted(smi_gpus))
        continue
    exact(f"{tag} name", g["name"], text(s, "product_name"))
    exact(f"{tag} uuid", g["uuid"], text(s, "uuid"))
    exact(f"{tag} persistence", pers.get(i, {}).get("persistence"), flag(text(s, "persistence_mode")))

    e = ecc.get(i, {})
    mode = e.get("ecc_mode") or {}
    exact(f"{tag} ecc mode current", mode.get("current"), flag(text(s, "ecc_mode/current_ecc")))
    exact(f"{tag} ecc mode pending", mode.get("pending"), flag(text(s, "ecc_mode/pending_ecc")))
    for kind in ("volatile", "aggregate"):
        ours = e.get(kind) or {}
        base = f"ecc_errors/{kind}"
        for field, paths in (
            ("dram_corrected", ["dram_correctable"]),
            ("dram_uncorrected", ["dram_uncorrectable"]),
            ("sram_corrected", ["sram_correctable"]),
        ):
            v = number(text(s, *[f"{base}/{p}" for p in paths]))
            exact(f"{tag} ecc {kind} {field}", ours.get(field), None if v is None else int(v))
        # r550+ splits SRAM uncorrectable into parity and SEC-DED.
        par = number(text(s, f"{base}/sram_uncorrectable_parity"))
        sec = number(text(s, f"{base}/sram_uncorrectable_secded"))
        one = number(text(s, f"{base}/sram_uncorrectable"))
        v = int(par + sec) if par is not None and sec is not None else (None if one is None else int(one))
        exact(f"{tag} ecc {kind} sram_uncorrected", ours.get("sram_uncorrected"), v)

    r = remap.get(i, {})
    rows = r.get("remapped_rows")
    smi_rows = s.find("remapped_rows")
    if rows is None:
        exact(f"{tag} remapped rows", None, number(text(s, "remapped_rows/remapped_row_corr")))
    else:
        for field, path in (("correctable", "remapped_row_corr"), ("uncorrectable", "remapped_row_unc")):
            v = number(text(smi_rows, path))
            exact(f"{tag} remapped rows {field}", rows[field], None if v is None else int(v))
        exact(f"{tag} remapped rows pending", rows["pending"], flag(text(smi_rows, "remapped_row_pending")))
        exact(f"{tag} remapped rows failure", rows["failure"], flag(text(smi_rows, "remapped_row_failure")))
        h = rows.get("histogram")
        smi_h = [number(text(smi_rows, f"row_remapper_histogram/row_remapper_histogram_{b}"))
                 for b in ("max", "high", "partial", "low", "none")]
        exact(f"{tag} row remapper histogram", h, None if None in smi_h else [int(x) for x in smi_h])
    ret = r.get("retired_pages")
    sbe = number(text(s, "retired_pages/multiple_single_bit_retirement/retired_count"))
    dbe = number(text(s, "retired_pages/double_bit_retirement/retired_count"))
    exact(f"{tag} retired pages (single, double)",
          None if ret is None else (ret["single_bit"], ret["double_bit"]),
          None if sbe is None or dbe is None else (int(sbe), int(dbe)))

    # Clocks event reasons: each bit as the doctor read it, within the two samples.
    mask = clk.get(i, {}).get("clocks_event_reasons")
    for bit, name in REASONS:
        vals = []
        for x in (s, s2):
            v = None
            for pre in ("clocks_event_reasons/clocks_event_reason_", "clocks_throttle_reasons/clocks_throttle_reason_"):
                v = flag(text(x, pre + name, pre + name.replace("clocks_setting", "clock_setting")))
                if v is not None:
                    break
            vals.append(v)
        ours = None if mask is None else bool(mask & bit)
        report(ours in vals, f"{tag} clocks event reason {name}", ours, vals)

    t = temp.get(i, {})
    between(f"{tag} temperature C", t.get("temperature_c"),
            number(text(s, "temperature/gpu_temp")), number(text(s2, "temperature/gpu_temp")), lambda a, b: 2)
    # Absolute thresholds, or (driver 580 on H100) thresholds relative to T.Limit:
    # T.Limit = current + the T.Limit margin; a threshold = T.Limit - its T.Limit value
    # (max operating: 0 C, slowdown: -2 C, shutdown: -8 C). Derived ones may be 1 C off
    # (the two readings are taken apart).
    cur, margin = number(text(s, "temperature/gpu_temp")), number(text(s, "temperature/gpu_temp_tlimit"))
    for ours, path, rel in (("slowdown_c", "gpu_temp_slow_threshold", "gpu_temp_slow_tlimit_threshold"),
                            ("shutdown_c", "gpu_temp_max_threshold", "gpu_temp_max_tlimit_threshold"),
                            ("max_operating_c", "gpu_temp_max_gpu_threshold", "gpu_temp_max_gpu_tlimit_threshold")):
        v = number(text(s, f"temperature/{path}"))
        r = number(text(s, f"temperature/{rel}"))
        o = t.get(ours)
        if v is None and None not in (cur, margin, r):
            d = cur + margin - r
            report(o is not None and abs(o - d) <= 1, f"{tag} temperature {ours} (from T.Limit)", o, d)
        else:
            exact(f"{tag} temperature {ours}", o, None if v is None else int(v))

    p = pwr.get(i, {})
    mw = lambda x: None if x is None else x / 1000.0
    # NVML's power usage is a 1 s average on Ampere and newer: within the average and
    # instant draws nvidia-smi printed before and after.
    draw = [number(text(x, f"{sec}/{f}")) for x in (s, s2)
            for sec in ("gpu_power_readings", "power_readings")
            for f in ("power_draw", "average_power_draw", "instant_power_draw")]
    draw = [d for d in draw if d is not None] or [None]
    between(f"{tag} power draw W", mw(p.get("power_mw")), min(draw) if None not in draw else None,
            max(draw) if None not in draw else None, lambda a, b: max(10.0, 0.1 * max(a, b)))
    for ours, paths in (("limit_mw", ["current_power_limit", "enforced_power_limit"]),
                        ("default_limit_mw", ["default_power_limit"])):
        v = number(text(s, *[f"gpu_power_readings/{x}" for x in paths], *[f"power_readings/{x}" for x in paths]))
        o = mw(p.get(ours))
        report((o is None and v is None) or (o is not None and v is not None and abs(o - v) <= 1.0),
               f"{tag} power {ours} W", o, v)

    # NVLink: the links nvidia-smi lists, up or not, and their error counters.
    links = {l["link"]: l for l in nvl.get(i, {}).get("links", [])}
    st = open(f"{OUT}/nvlink-status-{i}.txt").read()
    smi_links = {int(m.group(1)): "inactive" not in m.group(2).lower()
                 for m in re.finditer(r"Link (\d+): (.*)", st)}
    exact(f"{tag} nvlinks (link: up)", {k: v["active"] for k, v in links.items()}, smi_links)
    er = open(f"{OUT}/nvlink-errors-{i}.txt").read()
    for m in re.finditer(r"Link (\d+): (Replay|Recovery|CRC) Errors: (\d+)", er):
        link, what, n = int(m.group(1)), m.group(2), int(m.group(3))
        ours = (links.get(link, {}).get("errors") or {}).get({"Replay": "replay", "Recovery": "recovery", "CRC": "crc_flit"}[what])
        exact(f"{tag} nvlink {link} {what} errors", ours, n)

xid = checks["gpu.xid"]
smi_xids = int(open(f"{OUT}/xid-count.txt").read().strip() or 0)
if xid["details"]:
    exact("XID lines in the kernel log", sum(x["count"] for x in xid["details"]["xids"]), smi_xids)
else:
    print(f"NOTE  gpu.xid {xid['status']}: {xid['found']} (kernel log has {smi_xids} Xid lines)")

print(f"summary: {passed} agree, {failed} differ")
sys.exit(1 if failed else 0)
