//! `erdma-compare` as a user runs it: the table, `--json`, `--csv`, exit
//! statuses, and plots read back (SVG parsed as XML, PNG decoded).
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

use plotters::style::{Color, Palette};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn data(name: &str) -> String {
    format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn compare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_erdma-compare"))
        .args(args)
        .output()
        .expect("run erdma-compare")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("erdma-compare-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// The table lines of a text report: (size, [(time, busbw, ratio)]).
fn table(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

#[test]
fn reference_log_against_its_json() {
    let o = compare(&[
        &data("h200-all_reduce_perf-1gpu.txt"),
        &data("h200-all_reduce_perf-1G.json"),
    ]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("#  [1] h200-all_reduce_perf-1gpu.txt  nccl-tests log, baseline"),
        "{out}"
    );
    assert!(out.contains("# same in all runs:\n"), "{out}");
    assert!(out.contains("#   gpu "), "{out}");
    // What differs: the warmup count, the JSON's command line.
    let warmup = out
        .lines()
        .find(|l| l.starts_with("#   warmup"))
        .expect(&out);
    assert!(warmup.ends_with("[1] 5 [2] 1"), "{warmup}");
    let rows = table(&out);
    assert_eq!(rows.len(), 17, "{out}");
    // 1 GiB only in the JSON; 8 GiB only in the log.
    let g1 = rows.iter().find(|r| r[0] == "1 GiB").expect(&out);
    assert_eq!(g1[1], "-         -");
    assert!(g1[2].starts_with("505.1"), "{g1:?}");
}

#[test]
fn ratio_marks_and_fail_below() {
    // The second run of the pre-2.13 log is 8% slower everywhere.
    let f = data("compare/nccl-tests-2.11-all_reduce_perf.txt");
    let o = compare(&[&f]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for r in table(&out) {
        let cells: Vec<&str> = r[2].split_whitespace().collect();
        assert_eq!(&cells[2..], ["0.926", "!"], "{r:?}");
    }
    assert!(
        out.contains("# [2] vs [1]: 13 sizes compared, geometric mean 0.926"),
        "{out}"
    );

    let o = compare(&[&f, "--fail-below", "0.95"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("erdma-compare: ratio under 0.95 against nccl-tests-2.11-all_reduce_perf.txt#1: nccl-tests-2.11-all_reduce_perf.txt#2: 13 sizes"), "{err}");
    assert_eq!(compare(&[&f, "--fail-below", "0.9"]).status.code(), Some(0));
    // --mark moves the marks.
    let out = text(&compare(&[&f, "--mark", "0.9"]).stdout);
    assert!(table(&out).iter().all(|r| !r[2].contains('!')), "{out}");
}

#[test]
fn baseline_option_and_nothing_in_common() {
    let old = data("compare/nccl-tests-2.11-all_reduce_perf.txt");
    let info = data("compare/nccl-tests-16ranks-info.txt");
    let o = compare(&[&old, "--baseline", &info]);
    let out = text(&o.stdout);
    assert!(out.contains("#  [1] nccl-tests-16ranks-info.txt"), "{out}");
    assert!(out.contains("baseline"));
    // Different rank counts: bus bandwidth ratios (386.60 / 44.70 at 128 MiB).
    let r = table(&out).into_iter().find(|r| r[0] == "128 MiB").unwrap();
    assert!(r[2].ends_with("8.649"), "{r:?}");

    let perf = data("compare/perftest-rxe-write_bw.txt");
    let o = compare(&[&info, &perf, "--fail-below", "0.9"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stdout));
    assert!(text(&o.stderr).contains("shares no row with the baseline"));
}

#[test]
fn bad_inputs_and_arguments() {
    let garbage = tmp("garbage.txt");
    std::fs::write(&garbage, "hello\nthis is not a benchmark log\n").unwrap();
    let g = garbage.to_str().unwrap();
    let o = compare(&[&data("h200-all_reduce_perf-1gpu.txt"), g]);
    assert_eq!(o.status.code(), Some(3));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("erdma-compare: {g}:1: not a result file")),
        "{err}"
    );
    assert!(o.stdout.is_empty());

    let empty = tmp("empty.json");
    std::fs::write(&empty, "").unwrap();
    assert_eq!(compare(&[empty.to_str().unwrap()]).status.code(), Some(3));

    for bad in [
        &[][..],
        &["a", "--fail-below", "zero"],
        &["a", "--plot", "out.pdf"],
        &["a", "--placement", "sideways"],
    ] {
        let o = compare(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
    }
    let help = text(&compare(&["--help"]).stdout);
    assert!(help.contains("Exit status: 0 compared"), "{help}");
}

#[test]
fn truncated_log_warns_and_compares() {
    let full = std::fs::read_to_string(data("h200-all_reduce_perf-1gpu.txt")).unwrap();
    let cut = tmp("killed.txt");
    std::fs::write(&cut, &full[..full.find("  2147483648").unwrap() + 30]).unwrap();
    let o = compare(&[
        &data("h200-all_reduce_perf-1gpu.txt"),
        cut.to_str().unwrap(),
    ]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("# warning: [2] killed.txt: line 25: incomplete row ignored"),
        "{out}"
    );
    let rows = table(&out);
    let last = rows.iter().find(|r| r[0] == "2 GiB").unwrap();
    assert_eq!(last[2], "-         -       -", "{last:?}");
    let r512 = rows.iter().find(|r| r[0] == "512 MiB").unwrap();
    assert!(r512[2].ends_with("1.000"), "{r512:?}");
    // Machine output keeps warnings in the data and says them on stderr.
    let o = compare(&["--json", cut.to_str().unwrap()]);
    assert!(text(&o.stderr).contains("warning"), "{}", text(&o.stderr));
}

#[test]
fn json_and_csv_output() {
    let a = data("compare/ours-mpi-np2.json");
    let b = data("compare/ours-mpi-np2.csv");
    let o = compare(&["--json", &a, &b, "--placement", "both"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(j["tool"], "erdma-compare");
    for k in ["version", "host", "date", "command"] {
        assert!(!j[k].is_null(), "{k}");
    }
    assert_eq!(j["runs"].as_array().unwrap().len(), 2);
    assert_eq!(j["runs"][0]["context"]["backend"], "mpi");
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 18);
    for r in rows {
        let ratio = r["runs"][1]["ratio"].as_f64().unwrap();
        assert!((ratio - 1.0).abs() < 1e-5, "the same run twice: {r}");
        assert!(r["runs"][0]["ratio"].is_null());
    }
    assert_eq!(j["summaries"][0]["compared"], 18);

    let o = compare(&["--csv", &a, &b]);
    let mut rd = csv::Reader::from_reader(&o.stdout[..]);
    assert_eq!(&rd.headers().unwrap()[11], "ratio");
    let recs: Vec<csv::StringRecord> = rd.records().map(Result::unwrap).collect();
    assert_eq!(recs.len(), 2 * 9);
    assert_eq!(&recs[0][6], "1");
    assert_eq!(&recs[1][6], "2");
}

/// The `<polyline>`s of an SVG whose stroke is not black/grey: the series.
fn svg_series(path: &Path) -> (usize, Vec<String>) {
    let s = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&s).expect("valid SVG (XML)");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let lines: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| n.attribute("stroke").is_some_and(|c| c != "#000000"))
        .collect();
    // Each series: its line and its legend sample, in its own colour.
    let mut colors = std::collections::BTreeMap::<String, usize>::new();
    for n in &lines {
        *colors
            .entry(n.attribute("stroke").unwrap().to_string())
            .or_default() += 1;
    }
    assert!(colors.values().all(|&n| n == 2), "{colors:?}");
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .collect();
    (colors.len(), texts)
}

#[test]
fn svg_plot_has_one_series_per_input() {
    let svg = tmp("plot.svg");
    let files = [
        data("compare/nccl-tests-16ranks-info.txt"),
        data("compare/ours-mpi-np2.json"),
        data("compare/perftest-rxe-write_bw.txt"),
        data("h200-all_reduce_perf-1gpu.txt"),
    ];
    let mut args: Vec<&str> = files.iter().map(String::as_str).collect();
    args.extend([
        "--collective",
        "all_reduce_perf",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let o = compare(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let (series, texts) = svg_series(&svg);
    // The perftest run has no all_reduce_perf rows: three series.
    assert_eq!(series, 3, "{texts:?}");
    for label in [
        "8 B",
        "128 MiB",
        "8 GiB",
        "message size (log2 scale)",
        "bus bandwidth (GB/s)",
    ] {
        assert!(texts.iter().any(|t| t == label), "{label} not in {texts:?}");
    }
    let legend: Vec<&String> = texts.iter().filter(|t| t.starts_with('[')).collect();
    assert_eq!(legend.len(), 3, "{legend:?}");
    assert!(
        legend[0].starts_with("[1] nccl-tests-16ranks-info.txt ("),
        "{legend:?}"
    );
    assert!(legend[0].contains("ranks 16"), "{legend:?}");
    assert_eq!(
        texts.iter().filter(|t| t.starts_with("peak ")).count(),
        3,
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|t| t == "peak 44.92 GB/s @ 512 MiB"),
        "{texts:?}"
    );
}

#[test]
fn png_plot_decodes() {
    let png_path = tmp("plot.png");
    let o = compare(&[
        &data("compare/perftest-rxe-write_bw.txt"),
        &data("compare/perftest-rxe-write_bw-timeout.txt"),
        "--plot",
        png_path.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let dec = png::Decoder::new(std::fs::File::open(&png_path).unwrap());
    let mut reader = dec.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG data");
    assert_eq!((info.width, info.height), (1200, 700));
    // One colour per run, as the plot's palette gives them.
    let px = info.color_type.samples();
    let count = |i: usize| {
        let c = plotters::style::Palette99::pick(i).to_rgba();
        buf[..info.buffer_size()]
            .chunks(px)
            .filter(|p| (p[0], p[1], p[2]) == (c.0, c.1, c.2))
            .count()
    };
    assert!(
        count(0) > 100 && count(1) > 100,
        "{} {}",
        count(0),
        count(1)
    );
    assert_eq!(count(2), 0);

    // A directory that does not exist: one line, status 5.
    let o = compare(&[
        &data("compare/perftest-rxe-write_bw.txt"),
        "--plot",
        "/nonexistent/dir/p.png",
    ]);
    assert_eq!(o.status.code(), Some(5));
    assert_eq!(text(&o.stderr).lines().count(), 1, "{}", text(&o.stderr));
    // Latency only: nothing to plot.
    let o = compare(&[
        &data("compare/perftest-rxe-write_lat.txt"),
        "--plot",
        png_path.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(5));
    assert!(text(&o.stderr).contains("nothing to plot"));
}
