//! The parsers on real logs (the H200 reference, our MPI-backend runs,
//! perftest over the rig's Soft-RoCE) and on logs written from nccl-tests'
//! formats (before 2.13; 16 ranks with NCCL INFO lines), cut and broken.

use super::*;
use crate::compare::model::{Format, Placement, Run};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/");

fn data(name: &str) -> String {
    std::fs::read_to_string(format!("{DATA}{name}")).expect("test data")
}

fn runs(path: &str, text: &str) -> Vec<Run> {
    parse(path, text.as_bytes()).unwrap_or_else(|e| panic!("{}", e.describe(path)))
}

fn one(path: &str, text: &str) -> Run {
    let mut r = runs(path, text);
    assert_eq!(
        r.len(),
        1,
        "{:?}",
        r.iter().map(|r| &r.name).collect::<Vec<_>>()
    );
    r.remove(0)
}

/// (time, algbw, busbw, wrong) of a row.
fn row(r: &Run, size: u64, p: Placement) -> (Option<f64>, Option<f64>, Option<f64>, Option<f64>) {
    let row = r
        .rows
        .iter()
        .find(|x| x.key.size == size && x.key.placement == p)
        .unwrap_or_else(|| panic!("{} has no row {size} {p:?}", r.name));
    (row.m.time_us, row.m.algbw, row.m.busbw, row.m.wrong)
}

fn sizes(r: &Run, p: Placement) -> Vec<u64> {
    r.rows
        .iter()
        .filter(|x| x.key.placement == p)
        .map(|x| x.key.size)
        .collect()
}

#[test]
fn h200_reference_log() {
    let r = one("h200.txt", &data("h200-all_reduce_perf-1gpu.txt"));
    assert_eq!(r.format, Format::NcclText);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.rows.len(), 32);
    let expect: Vec<u64> = (0..16).map(|i| 8u64 << (2 * i)).collect();
    assert_eq!(sizes(&r, Placement::OutOfPlace), expect);
    assert_eq!(
        row(&r, 8 << 30, Placement::OutOfPlace),
        (Some(3997.68), Some(2148.7), Some(0.0), Some(0.0))
    );
    assert_eq!(row(&r, 512 << 20, Placement::InPlace).1, Some(2e6));
    let k = &r.rows[0].key;
    assert_eq!(
        (
            k.collective.as_str(),
            k.dtype.as_str(),
            k.op.as_str(),
            k.root
        ),
        ("all_reduce_perf", "float", "sum", -1)
    );
    let c = &r.context;
    for (key, v) in [
        ("nccl-tests", "2.19.6"),
        ("nccl", "2.28.9"),
        ("ranks", "1"),
        ("gpu", "NVIDIA H200"),
        ("hosts", "vm"),
        ("iters", "20"),
        ("warmup", "5"),
        ("agg iters", "1"),
    ] {
        assert_eq!(c.get(key), Some(v), "{key} in {c:?}");
    }
}

#[test]
fn h200_reference_json() {
    let r = one("h200.json", &data("h200-all_reduce_perf-1G.json"));
    assert_eq!(r.format, Format::NcclJson);
    assert_eq!(r.rows.len(), 2);
    assert_eq!(
        row(&r, 1 << 30, Placement::OutOfPlace),
        (Some(505.0912), Some(2125.83752), Some(0.0), Some(0.0))
    );
    assert_eq!(r.rows[0].key.collective, "all_reduce_perf");
    assert_eq!(r.rows[0].key.root, -1);
    let c = &r.context;
    assert_eq!(c.get("nccl"), Some("2.28.9"));
    assert_eq!(c.get("env"), Some("NCCL_VERSION=2.28.3-1"));
    assert_eq!(c.get("gpu"), Some("NVIDIA H200"));
    assert_eq!(c.get("iters"), Some("20"));
    assert_eq!(c.get("date"), Some("2026-12-02 08:41:32"));
    assert_eq!(
        c.get("command"),
        Some("./build/all_reduce_perf -b 1G -e 1G -g 1 -J ar.json")
    );
}

#[test]
fn nccl_tests_before_2_13_error_columns() {
    let text = data("compare/nccl-tests-2.11-all_reduce_perf.txt");
    let rs = runs("logs/nccl-tests-2.11-all_reduce_perf.txt", &text);
    assert_eq!(rs.len(), 2, "two runs concatenated");
    assert_eq!(rs[1].name, "logs/nccl-tests-2.11-all_reduce_perf.txt#2");
    for r in &rs {
        assert_eq!(r.format, Format::NcclTextOld);
        assert_eq!(r.rows.len(), 26);
        assert_eq!(r.rows[0].key.collective, "all_reduce_perf");
        assert_eq!(r.rows[0].key.root, -1, "no root column before 2.13");
        assert_eq!(r.rows[0].key.op, "sum");
        assert_eq!(r.context.get("ranks"), Some("8"));
        assert_eq!(r.context.get("gpu"), Some("A100-SXM4-80GB"));
        assert_eq!(r.context.get("iters"), Some("20"));
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(r.warnings[0].contains("taken from the file name"));
    }
    let (t, alg, bus, err) = row(&rs[0], 128 << 20, Placement::OutOfPlace);
    assert_eq!(
        (t, alg, bus, err),
        (Some(607.6), Some(220.91), Some(386.6), Some(0.0))
    );
    assert_eq!(row(&rs[1], 128 << 20, Placement::OutOfPlace).0, Some(656.2));
    // A name that says nothing: the collective is unknown, aligned later.
    let r = &runs("a.log", &text)[0];
    assert_eq!(r.rows[0].key.collective, "?");
    assert!(r.warnings[0].contains("aligned with any collective"));
}

#[test]
fn sixteen_ranks_with_nccl_info_interleaved() {
    let text = data("compare/nccl-tests-16ranks-info.txt");
    let r = one("info.txt", &text);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.rows.len(), 2 * 14);
    assert_eq!(
        row(&r, 8, Placement::OutOfPlace),
        (Some(38.0), Some(0.0), Some(0.0), Some(0.0))
    );
    assert_eq!(row(&r, 8, Placement::InPlace).0, Some(38.38));
    assert_eq!(row(&r, 2048, Placement::InPlace).0, Some(38.47));
    assert_eq!(row(&r, 512 << 20, Placement::OutOfPlace).2, Some(44.92));
    let c = &r.context;
    for (key, v) in [
        ("ranks", "16"),
        ("hosts", "node1,node2"),
        ("gpu", "NVIDIA H100 80GB HBM3"),
        ("nccl", "2.23.4"),
        ("cuda", "12.6"),
        ("net", "IB [0]erdma_0:1/RoCE [RO]"),
        ("env", "NCCL_IB_GID_INDEX=1 NCCL_IB_HCA=erdma_0"),
    ] {
        assert_eq!(c.get(key), Some(v), "{key} in {c:?}");
    }
    // The same under `mpirun --tag-output` and `srun --label`.
    for prefix in ["[1,0]<stdout>:", "  0: "] {
        let tagged: String = text.lines().map(|l| format!("{prefix}{l}\n")).collect();
        let t = one("tagged.txt", &tagged);
        assert_eq!(t.rows, r.rows, "{prefix}");
        assert_eq!(t.context, r.context);
    }
}

#[test]
fn several_collectives_and_runs_in_one_log() {
    let h200 = data("h200-all_reduce_perf-1gpu.txt");
    let gather = h200
        .replace("all_reduce_perf", "all_gather_perf")
        .replace("     float     sum", "     float    none");
    // all_reduce + all_gather: one run; then all_reduce again: a second.
    let text = format!("{h200}{gather}{h200}");
    let rs = runs("multi.txt", &text);
    assert_eq!(rs.len(), 2);
    assert_eq!(rs[0].collectives(), ["all_reduce_perf", "all_gather_perf"]);
    assert_eq!(rs[0].rows.len(), 64);
    assert_eq!(rs[1].collectives(), ["all_reduce_perf"]);
    assert_eq!(
        (rs[0].name.as_str(), rs[1].name.as_str()),
        ("multi.txt#1", "multi.txt#2")
    );
    let g = rs[0]
        .rows
        .iter()
        .find(|r| r.key.collective == "all_gather_perf");
    assert_eq!(g.map(|r| r.key.op.as_str()), Some("none"));
}

#[test]
fn repeated_rows_become_medians() {
    // -N 3: the table repeats its rows.
    let h200 = data("h200-all_reduce_perf-1gpu.txt");
    let rows: Vec<&str> = h200.lines().filter(|l| l.starts_with("  ")).collect();
    let slower = rows[0].replace("    7.23", "    9.00");
    let faster = rows[0].replace("    7.23", "    5.00");
    let text = h200.replacen(rows[0], &format!("{}\n{slower}\n{faster}", rows[0]), 1);
    let r = one("n3.txt", &text);
    let first = r.rows.iter().find(|x| x.key.size == 8).unwrap();
    assert_eq!((first.m.time_us, first.m.samples), (Some(7.23), 3));
}

#[test]
fn killed_run_is_read_up_to_its_last_complete_row() {
    let h200 = data("h200-all_reduce_perf-1gpu.txt");
    let cut = h200.find("  2147483648").unwrap() + 60;
    let r = one("killed.txt", &h200[..cut]);
    assert_eq!(sizes(&r, Placement::OutOfPlace).last(), Some(&(512 << 20)));
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert!(
        r.warnings[0].starts_with("line 25: incomplete row ignored"),
        "{:?}",
        r.warnings
    );
    assert!(
        r.warnings[1].contains("read up to line 24"),
        "{:?}",
        r.warnings
    );

    // A JSON file cut in the middle of its results.
    let json = data("compare/ours-mpi-np2.json");
    let at = json.find("\"size\":131072").unwrap() + 40;
    let r = one("cut.json", &json[..at]);
    assert_eq!(sizes(&r, Placement::OutOfPlace).last(), Some(&32768));
    assert!(r.warnings[0].contains("run killed?"), "{:?}", r.warnings);

    // Nothing complete at all is an error.
    let e = parse(
        "early.txt",
        &h200.as_bytes()[..h200.find("# Using").unwrap()],
    )
    .unwrap_err();
    assert!(e.msg.starts_with("no result rows"), "{e}");
}

#[test]
fn garbage_gets_one_line_naming_file_and_line() {
    let h200 = data("h200-all_reduce_perf-1gpu.txt");
    let bad = h200.replace("   255.89  2098.1", "   255.89  20x8.1");
    let e = parse("bad.txt", bad.as_bytes()).unwrap_err();
    assert_eq!(e.line, Some(24));
    let msg = e.describe("bad.txt");
    assert!(
        msg.starts_with("bad.txt:24: bad nccl-tests row: algbw `20x8.1` is not a number"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1);

    let e = parse("x.json", b"{\"results\": [1, 2,,]}").unwrap_err();
    assert_eq!(e.line, Some(1));
    assert!(e.msg.starts_with("invalid JSON"), "{e}");
    let e = parse("x.json", b"{\"a\": 1}").unwrap_err();
    assert!(e.msg.contains("not an nccl-tests -J file"), "{e}");

    let csv = data("compare/ours-mpi-np2.csv");
    let bad = csv.replacen(",sum,-1,in-place,", ",sum,minus one,in-place,", 1);
    let e = parse("bad.csv", bad.as_bytes()).unwrap_err();
    assert_eq!(e.line, Some(3));
    assert!(e.msg.starts_with("root `minus one`"), "{e}");

    let e = parse("noise.bin", &[0x7f, b'E', b'L', b'F', 0, 1, 2]).unwrap_err();
    assert_eq!(e.describe("noise.bin").lines().count(), 1);
}

#[test]
fn our_json_csv_and_log_from_an_mpi_run() {
    let j = one("ours.json", &data("compare/ours-mpi-np2.json"));
    let c = one("ours.csv", &data("compare/ours-mpi-np2.csv"));
    let t = one("ours.txt", &data("compare/ours-mpi-np2.txt"));
    assert_eq!((j.format, c.format), (Format::OursJson, Format::OursCsv));
    assert_eq!(j.rows.len(), 18);
    assert_eq!(c.rows.len(), 18);
    assert_eq!(t.rows.len(), 18);
    for ((a, b), t) in j.rows.iter().zip(&c.rows).zip(&t.rows) {
        assert_eq!(a.key, b.key);
        assert_eq!(a.key, t.key);
        let (x, y) = (a.m.time_us.unwrap(), b.m.time_us.unwrap());
        assert!((x - y).abs() < 1e-5 * x, "{x} {y}");
    }
    for r in [&j, &c] {
        let ctx = &r.context;
        assert_eq!(ctx.get("backend"), Some("mpi"), "{}", r.name);
        assert_eq!(ctx.get("ranks"), Some("2"));
        assert_eq!(ctx.get("hosts"), Some("vm"));
        assert_eq!(ctx.get("gpu"), Some("host memory (mpi backend)"));
        assert_eq!(ctx.get("env"), Some("NCCL_DEBUG=WARN NCCL_IB_HCA=erdma_0"));
        assert!(ctx.get("date").is_some_and(|d| d.ends_with('Z')), "{ctx:?}");
        assert!(
            ctx.get("command")
                .is_some_and(|d| d.contains("--backend mpi"))
        );
        assert_eq!(ctx.get("nccl"), None, "no NCCL with the MPI backend");
    }
}

#[test]
fn perftest_tables_from_the_rig() {
    // ib_write_bw -a that stopped on a CPU frequency check: the last row is
    // glued to the error message.
    let r = one("f.txt", &data("compare/perftest-rxe-write_bw-failed.txt"));
    assert_eq!(r.format, Format::Perftest);
    assert_eq!(r.rows.len(), 16);
    assert_eq!(r.rows[0].key.collective, "RDMA_Write BW");
    assert_eq!(r.rows[0].key.placement, Placement::None);
    let (t, alg, bus, _) = row(&r, 65536, Placement::None);
    assert_eq!(t, None);
    assert_eq!(alg, bus);
    assert!((bus.unwrap() - 13.99 * 1048576.0 / 1e9).abs() < 1e-12);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.starts_with("line 39: incomplete row")),
        "{:?}",
        r.warnings
    );
    assert_eq!(r.context.get("device"), Some("rxe1"));
    assert_eq!(r.context.get("mtu"), Some("1024[B]"));
    assert_eq!(r.context.get("connection type"), Some("RC"));

    // The whole table of ib_write_bw -a.
    let r = one("w.txt", &data("compare/perftest-rxe-write_bw.txt"));
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.rows.len(), 23);
    assert_eq!(r.rows.last().map(|x| x.key.size), Some(8 << 20));

    // Killed by timeout: no closing line.
    let r = one("t.txt", &data("compare/perftest-rxe-write_bw-timeout.txt"));
    assert_eq!(r.rows.last().map(|x| x.key.size), Some(1 << 20));
    assert!(
        r.warnings.iter().any(|w| w.contains("no closing line")),
        "{:?}",
        r.warnings
    );

    // --report_gbits: Gb/s to GB/s.
    let r = one("g.txt", &data("compare/perftest-rxe-send_bw-gbits.txt"));
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.rows[0].key.collective, "Send BW");
    assert_eq!(row(&r, 65536, Placement::None).2, Some(0.084028 / 8.0));

    // Latency: t_typical.
    let r = one("l.txt", &data("compare/perftest-rxe-write_lat.txt"));
    assert_eq!(r.rows[0].key.collective, "RDMA_Write Latency");
    assert_eq!(row(&r, 8, Placement::None), (Some(57.96), None, None, None));
}

#[test]
fn perftest_latency_and_duration_layouts() {
    let text = "\
---------------------------------------------------------------------------------------
                    Send Latency Test
 Dual-port       : OFF\t\tDevice         : erdma_0
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       1000          4.01           9.87         4.22     \t       4.30     \t0.21  \t\t5.10  \t\t9.87 
 4       1000          4.02           9.11         4.23     \t       4.31     \t0.20  \t\t5.00  \t\t9.11 
---------------------------------------------------------------------------------------
---------------------------------------------------------------------------------------
                    RDMA_Read Latency Test
 Dual-port       : OFF\t\tDevice         : erdma_0
---------------------------------------------------------------------------------------
 #bytes        #iterations       t_avg[usec]    tps average
 8             1000              3.50           285000.00
---------------------------------------------------------------------------------------
";
    let r = one("lat.txt", text);
    assert_eq!(r.collectives(), ["Send Latency", "RDMA_Read Latency"]);
    assert_eq!(r.rows[1].m.time_us, Some(4.23));
    assert_eq!(r.rows[2].m.time_us, Some(3.5));
    assert_eq!(r.context.get("device"), Some("erdma_0"));
}

#[test]
fn a_long_log_streamed_reads_as_a_whole_one() {
    // The reference log's table repeated past DETECT_BYTES (-N cycles),
    // then a bad row: streamed, the runs and the error line are the same.
    let log = data("h200-all_reduce_perf-1gpu.txt");
    let (head, table) = log.split_at(log.find("           8 ").expect("first row"));
    let rows: String = table
        .lines()
        .take_while(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut text = head.to_string();
    while text.len() < 2 * DETECT_BYTES as usize {
        text.push_str(&rows);
    }
    let whole = parse("x.txt", text.as_bytes()).unwrap();
    let streamed = parse_stream("x.txt", text.as_bytes()).unwrap();
    assert_eq!(format!("{whole:?}"), format!("{streamed:?}"));
    assert!(whole[0].rows.iter().all(|r| r.m.samples > 1), "merged");
    text.push_str("        1024   256 float sum -1 x y z 0 1 2 3 0\n");
    let a = parse("x.txt", text.as_bytes()).unwrap_err();
    let b = match parse_stream("x.txt", text.as_bytes()) {
        Err(StreamError::Parse(e)) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(a, b);
}
