//! The real H200 sample (nccl-tests 2.19.6, NCCL 2.28.3), rebuilt line by
//! line from its own numbers.

use super::*;
use crate::nccltests::options::{Parsed, Printed, parse};
use crate::nccltests::types::Features;

const SAMPLE: &str = include_str!("../../../../tests/data/h200-all_reduce_perf-1gpu.txt");

fn sample_options() -> Options {
    let argv: Vec<String> = "./build/all_reduce_perf -b 8 -e 8G -f 4 -w 5 -g 1"
        .split_whitespace()
        .map(String::from)
        .collect();
    match parse(&argv, Features::ALL, 22809, &mut Printed::default()) {
        Parsed::Run(o) => *o,
        Parsed::Exit(c) => panic!("exit {c}"),
    }
}

fn num(s: &str) -> f64 {
    s.parse().unwrap()
}

#[test]
fn every_row_is_rebuilt_from_its_numbers() {
    let rows: Vec<&str> = SAMPLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert_eq!(rows.len(), 16);
    for line in rows {
        let f: Vec<&str> = line.split_whitespace().collect();
        let mut text = row_start(
            num(f[0]) as u64,
            num(f[1]) as u64,
            f[2],
            f[3],
            f[4].parse().unwrap(),
        );
        text += &row_body(num(f[5]), num(f[6]), num(f[7]), Some(f[8].parse().unwrap()));
        text += &row_body(
            num(f[9]),
            num(f[10]),
            num(f[11]),
            Some(f[12].parse().unwrap()),
        );
        assert_eq!(text, line);
    }
}

#[test]
fn algbw_recomputed_from_size_and_time() {
    // The out-of-place algbw column follows from size / time (the time is
    // printed rounded, so compare at the printed precision).
    for line in SAMPLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let alg = num(f[0]) / 1e9 / (num(f[5]) * 1e-6);
        let rel = (alg - num(f[6])).abs() / num(f[6]).max(0.005);
        assert!(
            rel < 0.01 || (alg - num(f[6])).abs() < 0.006,
            "{line}: {alg}"
        );
    }
}

#[test]
fn whole_document_matches() {
    let o = sample_options();
    let mut doc = preamble(&o, 22809, 22809);
    doc += "# Using devices\n";
    doc += &device_block(&[DeviceLine {
        rank: 0,
        group: 0,
        pid: 1300,
        hostname: "vm".into(),
        device: 0,
        pci: (0, 0, 6),
        name: "NVIDIA H200".into(),
    }]);
    doc += &header(false, false, false);
    for line in SAMPLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        doc += line;
        doc += "\n";
    }
    doc += &footer(0, 0.0, -1.0, "all_reduce_perf");
    doc += "#\n";
    doc += &errors_line("");
    assert_eq!(doc, SAMPLE);
}

#[test]
fn footer_verdicts() {
    let f = footer(2, 21.5, 30.0, "x");
    assert!(
        f.starts_with("# Out of bounds values : 2 FAILED\n# Avg bus bandwidth    : 21.5 FAILED\n")
    );
    assert!(footer(0, 28.0, 30.0, "x").contains(": 28 OK\n"));
}

#[test]
fn row_variants() {
    assert_eq!(
        row_body(1.0, 2.0, 3.0, None),
        "     1.00    2.00    3.00    N/A"
    );
    assert_eq!(
        row_body(1.0, 2.0, 3.0, Some(1234567)),
        "     1.00    2.00    3.00  1.23457e+06"
    );
    assert_eq!(
        row_start(8, 2, "float", "none", 3),
        "           8             2     float    none       3"
    );
}

#[test]
fn headers_with_options() {
    let h = header(true, true, false);
    assert!(h.contains("  cputime   algbw"));
    assert!(h.ends_with("           %Y-%m-%d %H:%M:%S\n"), "{h}");
    let h = header(false, false, true);
    assert!(h.contains("i_min    i_max    i_p99    i_cv%"));
}

#[test]
fn memory_strings() {
    assert_eq!(mem_string(512), "512 B");
    assert_eq!(mem_string(1536), "1.50 KB");
    assert_eq!(mem_string(50 << 20), "50.0 MB");
    assert_eq!(mem_string(3 << 30), "3.00 GB");
    assert_eq!(
        mem_line(0, 1 << 20, 0),
        "# GPU memory usage     : Initialization 0.00 B | User-Allocated 1.00 MB | Collective 0.00 B | Total  1.00 MB\n"
    );
}

#[test]
fn device_block_truncates_like_a_2048_byte_buffer() {
    let line = DeviceLine {
        rank: 0,
        group: 0,
        pid: 1,
        hostname: "h".into(),
        device: 0,
        pci: (0, 0, 0),
        name: "x".repeat(100),
    };
    let block = device_block(&vec![line; 30]);
    assert_eq!(block.len(), 2047);
    assert!(block.ends_with("...\n"));
}
