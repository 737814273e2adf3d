//! report.html from documents built by hand: today's shape (doctor, pairs,
//! baseline) and one with every newer key (rails, nccl, traffic, verdicts).

use serde_json::{Value, json};

use super::svg::{self, Cell};
use super::*;

const EVIL: &str = "<script>alert('x')</script>&\"h\u{1}";

fn host(rank: usize, name: &str, status: &str) -> Value {
    json!({"rank": rank, "host": name, "label": name, "status": status,
           "summary": {"ok": 20, "warn": 1, "fail": if status == "fail" {2} else {0}, "skip": 3}})
}

fn run(c: usize, s: usize, role: &str, gbps: Option<f64>, error: Option<&str>) -> Value {
    json!({"client": c, "server": s, "role": role, "gbps": gbps, "error": error, "doc": null})
}

/// The document as erdma-cluster writes it today: three hosts (one with a
/// hostile name), a problem, a difference, a 3x3 matrix with one failed
/// direction, and a baseline.
fn today() -> Value {
    json!({
        "tool": "erdma-cluster", "version": "0.1.0", "host": "h0",
        "date": "2026-12-05T03:00:00Z",
        "command": ["erdma-cluster", "--pairs", "--devices", "erdma_0",
                    "--perf-args", "-x 1 -s 1048576 --report_gbits", "--out", "r"],
        "status": "fail", "exit_status": 2,
        "hosts": [host(0, "h0", "ok"), host(1, EVIL, "fail"), host(2, "h2", "warn")],
        "problems": [{"id": "rdma.ports", "status": "fail", "hosts": [EVIL],
                      "found": "erdma_0 port 1 DOWN", "fix": "check the NIC's link"}],
        "across": [{"id": "cluster.versions", "status": "warn", "hosts": ["h0", "h2"],
                    "found": "NCCL differs", "fix": "use the same NCCL"}],
        "reports": [],
        "pairs": {"test": "write_bw", "unit": "Gb/s", "status": "fail",
                  "gbps": [[null, 80.0, 80.0], [80.0, null, null], [40.0, 80.0, null]],
                  "runs": [run(0, 1, "client", Some(80.0), None),
                           run(1, 2, "client", None, Some("ibv_post_send: EIO <b>")),
                           run(1, 2, "server", None, Some("accept: timed out"))]},
        "baseline": {"dir": "accepted/", "fail_below": 0.9, "status": "fail",
                     "rows": [{"client": "h0", "server": "h2", "gbps": 80.0,
                               "baseline_gbps": 80.0, "ratio": 1.0, "status": "ok", "note": ""},
                              {"client": "h2", "server": "h0", "gbps": 40.0,
                               "baseline_gbps": 80.0, "ratio": 0.5, "status": "fail",
                               "note": "under 0.9 of the baseline"}]}
    })
}

fn rows(scale: f64) -> Value {
    let sizes = [8.0, 1024.0, 1048576.0, 1073741824.0];
    sizes
        .iter()
        .enumerate()
        .map(|(k, s)| {
            json!({"size": s, "count": s / 4.0, "type": "float", "algbw": scale * k as f64,
                   "busbw": scale * (k as f64 + 0.5), "time_us": 10.0, "wrong": 0})
        })
        .collect()
}

/// Today's document with every key the contract adds.
fn full() -> Value {
    let mut d = today();
    d["pairs"]["rails"] = json!([
        {"rail": 0, "devices": ["erdma_0", "erdma_0", "erdma_0"],
         "gbps": d["pairs"]["gbps"].clone()},
        {"rail": 1, "devices": ["erdma_1", "erdma_1", "erdma_1"],
         "gbps": [[null, 90.0, 90.0], [90.0, null, 90.0], [90.0, 30.0, null]]}
    ]);
    d["pairs"]["runs"] = json!([
        {"client": 2, "server": 1, "role": "client", "gbps": 30.0, "error": null, "doc": null,
         "rail": 1, "client_device": "erdma_1", "server_device": "erdma_1", "verified": true,
         "rerun": "mpirun -np 2 -H h2,h1 erdma-cluster --pairs --devices erdma_1,erdma_1"},
        {"client": 1, "server": 2, "role": "client", "gbps": null, "error": "payload corrupted",
         "doc": null, "rail": 0, "client_device": "erdma_0", "server_device": "erdma_0",
         "verified": true, "corrupt": true, "rerun": "RERUN-PAIR-1-2"},
        {"client": 0, "server": 2, "role": "client", "gbps": null, "error": null,
         "doc": null, "rail": 1, "client_device": "erdma_1", "server_device": "erdma_1",
         "verified": true, "corrupt": true, "rerun": ""},
        {"client": 0, "server": 1, "role": "client", "gbps": 90.0, "error": null,
         "doc": null, "rail": 1, "verified": false, "corrupt": false, "rerun": ""}
    ]);
    d["pairs"]["verified"] = json!(true);
    d["nccl"] = json!({
        "backend": "mpi", "why": "no GPU on these hosts: host memory", "status": "fail",
        "stages": [
            {"name": "host h0", "scope": "host", "hosts": ["h0"], "collective": "all_reduce",
             "status": "ok", "error": null, "json": "nccl-host-h0.json", "rows": rows(2.0),
             "expected_busbw": null, "expected_why": "one host", "baseline_rows": null,
             "rerun": "RERUN-H0"},
            {"name": format!("host {EVIL}"), "scope": "host", "hosts": [EVIL],
             "collective": "all_reduce", "status": "ok", "error": null,
             "json": "nccl-host-x.json", "rows": rows(2.1), "expected_busbw": null,
             "expected_why": "", "baseline_rows": null},
            {"name": "cluster", "scope": "cluster", "hosts": ["h0", EVIL, "h2"],
             "collective": "all_reduce", "status": "fail", "error": "busbw under expected",
             "json": "nccl-cluster.json", "rows": rows(1.0), "expected_busbw": 9.0,
             "expected_why": "slowest NIC 30 Gb/s x 2 NICs", "baseline_rows": rows(3.0)}
        ]
    });
    d["traffic"] = json!({"status": "fail", "rows": [
        {"host": "h0", "nic": "erdma_0", "stage": "cluster", "tx_bytes": 3221225472u64,
         "rx_bytes": 3221225472u64, "expected_bytes": 2147483648u64, "errors": {},
         "verdict": "ok", "why": ""},
        {"host": EVIL, "nic": "erdma_0", "stage": "cluster", "tx_bytes": 1024, "rx_bytes": 0,
         "expected_bytes": 2147483648u64, "errors": {"retrans": 12}, "verdict": "fail",
         "why": "NCCL_IB_DISABLE=1: NCCL used sockets"},
        {"host": "h2", "nic": "erdma_0", "stage": "cluster", "tx_bytes": null, "rx_bytes": null,
         "expected_bytes": null, "errors": {}, "verdict": "cannot prove",
         "why": "the driver has no byte counters"},
        {"host": "h2", "nic": "rxe0", "stage": "cluster", "tx_bytes": null, "rx_bytes": null,
         "tx_packets": 1200, "rx_packets": 1100, "expected_bytes": null, "errors": {},
         "verdict": "cannot prove", "why": "rxe counts packets only"}]});
    d["verdicts"] = json!([
        {"kind": "nic", "hosts": [EVIL], "nic": 0, "why": "payload corrupted on erdma_0",
         "numbers": {"gbps": 0}},
        {"kind": "link", "hosts": ["h2", "h1"], "nic": 1, "why": "30 Gb/s, median 90",
         "numbers": {"ratio": 0.33}}
    ]);
    d["predicted_wall_s"] = json!(95.5);
    d
}

fn parse(html: &str) -> roxmltree::Document<'_> {
    let opt = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(html, opt)
        .unwrap_or_else(|e| panic!("report.html is not well-formed: {e}\n{html}"))
}

fn class_is(n: &roxmltree::Node, class: &str) -> bool {
    n.attribute("class")
        .is_some_and(|c| c.split(' ').any(|w| w == class))
}

fn count(d: &roxmltree::Document, tag: &str, class: &str) -> usize {
    d.descendants()
        .filter(|n| n.tag_name().name() == tag && class_is(n, class))
        .count()
}

/// Well-formed, self-contained: no script, nothing fetched, links only to
/// anchors and files next to the page.
fn check_page(html: &str) {
    let d = parse(html);
    for n in d.descendants().filter(|n| n.is_element()) {
        let tag = n.tag_name().name();
        assert!(
            !matches!(tag, "script" | "iframe" | "link" | "object"),
            "<{tag}> in the page"
        );
        // Images only embedded (the large heatmap), nothing fetched.
        if let Some(src) = n.attribute("src") {
            assert!(
                tag == "img" && src.starts_with("data:image/png;base64,"),
                "src= on <{tag}>"
            );
        }
        assert!(
            n.attributes().all(|a| !a.name().starts_with("on")),
            "event handler on <{tag}>"
        );
        if let Some(h) = n.attribute("href") {
            assert!(!h.contains("://"), "href {h}");
        }
    }
}

#[test]
fn todays_document_is_a_well_formed_page_with_its_sections() {
    let html = render(&today());
    check_page(&html);
    for id in ["hosts", "problems", "pairs", "baseline"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id}");
    }
    for id in ["nccl", "traffic", "verdicts"] {
        assert!(
            !html.contains(&format!("id=\"{id}\"")),
            "{id} without its key"
        );
    }
    // The verdict is the first thing in the body.
    let d = parse(&html);
    let body = d.descendants().find(|n| n.has_tag_name("body")).unwrap();
    let first = body.first_element_child().unwrap();
    assert_eq!(first.tag_name().name(), "h1");
    assert!(html.find("FAIL: not ready").unwrap() < html.find("id=\"hosts\"").unwrap());
}

#[test]
fn heatmap_has_one_cell_per_measured_direction() {
    let d_today = render(&today());
    let d = parse(&d_today);
    assert_eq!(count(&d, "svg", "heatmap"), 1);
    assert_eq!(count(&d, "rect", "cell"), 6, "3 ranks: 6 directions");
    assert_eq!(count(&d, "rect", "failed"), 1, "1 -> 2 failed");
    assert_eq!(count(&d, "rect", "diag"), 3);
    let full = render(&full());
    let d = parse(&full);
    assert_eq!(count(&d, "svg", "heatmap"), 2, "one per rail");
    assert_eq!(count(&d, "rect", "cell"), 12);
    assert_eq!(count(&d, "svg", "legend"), 2);
}

#[test]
fn cells_no_round_planned_are_not_measured_not_failed() {
    // 2 -> 1 and 0 -> 2 null: 2 -> 1 left out by the schedule, 1 -> 2
    // planned and failed (its runs have errors).
    let mut doc = today();
    doc["pairs"]["gbps"][2][1] = Value::Null;
    doc["pairs"]["not_measured"] = json!([[2, 1], "junk", [9]]);
    let html = render(&doc);
    check_page(&html);
    let d = parse(&html);
    assert_eq!(count(&d, "rect", "cell"), 6);
    assert_eq!(count(&d, "rect", "failed"), 1, "1 -> 2 still failed");
    let un: Vec<_> = d
        .descendants()
        .filter(|n| n.has_tag_name("rect") && class_is(n, "unmeasured"))
        .collect();
    assert_eq!(un.len(), 1);
    assert_eq!(un[0].attribute("fill"), Some(svg::NOT_MEASURED));
    let tip = un[0].first_element_child().unwrap().text().unwrap();
    assert!(tip.ends_with("not measured (no round planned it)"), "{tip}");
    assert!(html.contains("1 of 6 cells <b>not measured</b>"), "{html}");
    assert!(html.contains(">not measured</text>"), "the legend's swatch");
    // Without the key every empty cell is a failure, as before.
    let plain = render(&today());
    assert_eq!(count(&parse(&plain), "rect", "unmeasured"), 0);
}

#[test]
fn cells_are_coloured_by_the_baseline_or_the_median() {
    // The fills of the cells that have a value.
    let fills_of = |html: &str| -> Vec<String> {
        parse(html)
            .descendants()
            .filter(|n| n.has_tag_name("rect") && class_is(n, "cell") && !class_is(n, "failed"))
            .map(|n| n.attribute("fill").unwrap().to_owned())
            .collect()
    };
    // With a baseline, rail 0 compares with it: h0 -> h2 at 1.0, h2 -> h0
    // at 0.5; the others have no baseline row.
    let fills = fills_of(&render(&today()));
    let fills: Vec<&str> = fills.iter().map(String::as_str).collect();
    assert!(
        fills.contains(&svg::ratio_colour(1.0).as_str()),
        "{fills:?}"
    );
    assert!(
        fills.contains(&svg::ratio_colour(0.5).as_str()),
        "{fills:?}"
    );
    assert_eq!(fills.iter().filter(|f| **f == svg::NO_REFERENCE).count(), 3);
    // Without one, against the median (80): 40 is 0.5, 80 is 1.0.
    let mut doc = today();
    doc.as_object_mut().unwrap().remove("baseline");
    let html = render(&doc);
    assert!(html.contains("0.50x") && html.contains("1.00x"), "{html}");
    assert!(!fills_of(&html).iter().any(|f| f == svg::NO_REFERENCE));
}

#[test]
fn colour_scale() {
    assert_eq!(svg::ratio_colour(1.0), "#91cf60");
    assert_eq!(svg::ratio_colour(0.1), "#d73027");
    assert_eq!(svg::ratio_colour(f64::NAN), "#d73027");
    assert_eq!(svg::ratio_colour(9.0), "#1a9850");
    assert_ne!(svg::ratio_colour(0.95), svg::ratio_colour(0.85));
}

#[test]
fn one_curve_per_nccl_stage_and_the_baselines() {
    let html = render(&full());
    let d = parse(&html);
    assert_eq!(count(&d, "svg", "busbw"), 1);
    assert_eq!(count(&d, "polyline", "curve"), 3);
    assert_eq!(count(&d, "polyline", "baseline-curve"), 1);
    assert_eq!(count(&d, "line", "expected"), 1);
    // Each curve goes through its four sizes, left to right (log x).
    for c in d
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && class_is(n, "curve"))
    {
        let xs: Vec<f64> = c
            .attribute("points")
            .unwrap()
            .split(' ')
            .map(|p| p.split(',').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(xs.len(), 4);
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{xs:?}");
        // 8 B -> 1 KiB is 7 doublings, 1 KiB -> 1 MiB 10: equal steps per doubling.
        let per = |a: usize, b: usize, doublings: f64| (xs[b] - xs[a]) / doublings;
        assert!((per(0, 1, 7.0) - per(1, 2, 10.0)).abs() < 0.2, "{xs:?}");
    }
    for id in ["nccl", "traffic", "verdicts"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id}");
    }
}

#[test]
fn every_string_of_the_document_is_escaped() {
    let html = render(&full());
    check_page(&html);
    assert!(!html.contains("<script>"));
    let d = parse(&html);
    // The hostile host name comes back as text, its control character
    // replaced (XML forbids it).
    let shown = EVIL.replace('\u{1}', "\u{FFFD}");
    assert!(
        d.descendants().any(|n| n.text() == Some(shown.as_str())),
        "{shown:?} not shown as text"
    );
    let html = render(&today());
    assert!(html.contains("ibv_post_send: EIO &lt;b&gt;"), "{html}");
}

#[test]
fn failed_pairs_and_stages_carry_a_command_that_reruns_only_them() {
    // Today's runs have no "rerun": one is built from the document.
    let html = render(&today());
    let built = "mpirun -np 2 -H &#39;&lt;script&gt;"; // the hostile name, quoted and escaped
    assert!(html.contains(built), "{html}");
    assert!(
        html.contains(
            "erdma-cluster --pairs --pair-test write_bw --devices erdma_0,erdma_0 \
             --perf-args &#39;-x 1 -s 1048576 --report_gbits&#39;"
        ),
        "{html}"
    );
    // The newer documents give theirs; a stage without one gets a built one.
    let html = render(&full());
    assert!(html.contains("RERUN-PAIR-1-2"));
    // A corrupted run without an error line fails; an empty "rerun" is
    // replaced by a built command; an unverified good run is no failure.
    assert!(
        html.contains("client side: the payload arrived corrupted"),
        "{html}"
    );
    assert!(
        html.contains("mpirun -np 2 -H h0,h2 erdma-cluster --pairs --pair-test write_bw --devices erdma_1,erdma_1"),
        "{html}"
    );
    assert_eq!(html.matches("<pre>").count(), 3, "2 pairs, 1 stage: {html}");
    assert!(
        !html.contains("RERUN-H0"),
        "a stage that passed needs no rerun"
    );
    assert!(
        html.contains("all_reduce_perf -b 8 -e 1073741824 -f 2 -c 1 --backend mpi"),
        "{html}"
    );
}

#[test]
fn pair_rerun_takes_devices_from_the_run_the_rail_or_the_command() {
    let doc = full();
    let run = json!({"rail": 1});
    let cmd = pair_rerun(&doc, &run, 0, 2);
    assert!(
        cmd.starts_with("mpirun -np 2 -H h0,h2 erdma-cluster --pairs"),
        "{cmd}"
    );
    assert!(cmd.contains("--devices erdma_1,erdma_1"), "{cmd}");
    let run = json!({"client_device": "mlx5_0", "server_device": "mlx5_1"});
    assert!(pair_rerun(&doc, &run, 0, 2).contains("--devices mlx5_0,mlx5_1"));
    let mut shared = today();
    shared["hosts"][1]["host"] = json!("h0");
    let cmd = pair_rerun(&shared, &json!({}), 0, 1);
    assert!(cmd.starts_with("mpirun -np 2 -H h0:2 "), "{cmd}");
}

#[test]
fn traffic_and_verdicts_are_shown_with_their_why() {
    let html = render(&full());
    assert!(html.contains("3.00 GiB"), "tx bytes with a unit");
    assert!(html.contains("not counted"), "null counters are not 0");
    assert!(
        html.contains("1200 packets"),
        "packets where bytes are not counted"
    );
    assert!(html.contains("Every byte received was checked."));
    assert!(html.contains("retrans +12"));
    assert!(html.contains("NCCL_IB_DISABLE=1: NCCL used sockets"));
    assert!(html.contains("payload corrupted on erdma_0"));
    assert!(html.contains("schedule estimate 95.5 s"));
    // Problems once each in their table, with their fix (the banner's
    // "what to do" names the fix of the first few as well).
    let problems = &html[html.find("id=\"problems\"").unwrap()..];
    assert_eq!(problems.matches("check the NIC&#39;s link").count(), 1);
    let banner = &html[..html.find("id=\"hosts\"").unwrap()];
    assert!(banner.contains("What to do"), "{banner}");
    assert!(banner.contains("check the NIC&#39;s link"), "{banner}");
}

#[test]
fn any_json_renders_without_panic() {
    let odd = [
        json!(null),
        json!([]),
        json!("text"),
        json!({"hosts": "x", "pairs": {"gbps": [[1, 2, 3], [], ["a"]]}}),
        json!({"pairs": {"gbps": [[null, 1e308], [-5, null]], "rails": []},
               "nccl": {"stages": [{"rows": [{"size": 0, "busbw": 1}, {"size": -1}]},
                                   {"rows": "no"}]},
               "traffic": {"rows": [{"tx_bytes": -1.5}]}, "verdicts": [{}]}),
        json!({"pairs": {"gbps": [], "runs": [{"client": 99, "server": 0, "error": "e"}]},
               "nccl": {"stages": [{"rows": [{"size": 8, "busbw": f64::MAX}]}]}}),
    ];
    for doc in odd {
        let html = render(&doc);
        check_page(&html);
    }
}

#[test]
fn out_writes_report_html_beside_cluster_json() {
    let dir = std::env::temp_dir().join(format!("erdma-cluster-html-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    super::super::write_out(&dir, &[], None, &full()).unwrap();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    check_page(&html);
    assert_eq!(html, render(&full()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_heatmap_cell_knows_its_numbers() {
    let cells = vec![
        vec![
            Cell::Diagonal,
            Cell::Value {
                gbps: 12.5,
                ratio: Some(0.8),
                tip: "a -> b".into(),
            },
        ],
        vec![
            Cell::Failed {
                tip: "b -> a: <x>".into(),
            },
            Cell::Diagonal,
        ],
    ];
    let s = svg::heatmap(&["a".into(), "b".into()], &cells);
    assert!(s.contains("12.5") && s.contains("0.80x"), "{s}");
    assert_eq!(svg::gbps_text(0.0612), "0.061");
    assert_eq!(svg::gbps_text(96.5), "96.5");
    assert_eq!(svg::gbps_text(190.4), "190");
    assert!(s.contains("b -&gt; a: &lt;x&gt;"), "{s}");
}

/// Today's document after a retest: h2 (slow towards h0) confirmed, the
/// suspect link h0-EVIL cleared, one retest run failed.
fn retested() -> Value {
    let mut d = today();
    let run = |c: usize, s: usize, role: &str, g: Option<f64>, e: Option<&str>| {
        json!({"client": c, "server": s, "role": role, "gbps": g, "error": e, "doc": null,
               "rail": 0, "share": 1})
    };
    d["retest"] = json!({
        "suspects": [{"kind": "host", "hosts": [2], "nic": null},
                     {"kind": "link", "hosts": [0, 1], "nic": 0}],
        "rounds": [[[2, 0]], [[2, 1]]], "left": 1, "good": 1,
        "runs": [run(2, 0, "client", Some(30.0), None), run(2, 0, "server", None, None),
                 run(0, 2, "client", Some(80.0), None),
                 run(2, 1, "client", None, Some("accept: timed out")),
                 run(1, 2, "client", Some(70.0), None)]
    });
    d["verdicts"] = json!([{"kind": "host", "hosts": ["h2"], "nic": null, "why": "slow",
                            "numbers": {}, "retested": true, "status": "fail",
                            "confirmed": true, "source": "pairs"}]);
    d
}

/// A suspect still a verdict but not confirmed says why, in the text
/// report's words (the retest measured it again without seeing it).
#[test]
fn a_suspect_not_confirmed_says_why_as_the_text_does() {
    let mut d = retested();
    d["verdicts"][0]["confirmed"] = json!(false);
    d["verdicts"][0]["status"] = json!("warn");
    d["verdicts"][0]["seen_again"] = json!(false);
    let html = render(&d);
    check_page(&html);
    let words = crate::cluster::retest::suspect_words(Some((false, false, true)));
    assert!(
        html.contains(&format!(
            "<span class=\"badge b-warn\">{}</span>",
            esc(words)
        )),
        "{html}"
    );
}

#[test]
fn the_retest_section_shows_suspects_rounds_and_runs_beside_the_first_pass() {
    let html = render(&retested());
    check_page(&html);
    assert!(html.contains("<a href=\"#retest\">Retest</a>"));
    let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("{s} not in {html}"));
    assert!(
        at("id=\"verdicts\"") < at("id=\"retest\"") && at("id=\"retest\"") < at("id=\"pairs\"")
    );
    assert!(html.contains(
        "The first pass named 2 suspect(s); the retest measured them again in 2 round(s), 2 pair(s)"
    ));
    assert!(html.contains("1 request(s) did not fit"));
    let d = parse(&html);
    let tables: Vec<_> = d
        .descendants()
        .filter(|n| n.has_tag_name("table"))
        .collect();
    let rows_of = |t: &roxmltree::Node| -> Vec<Vec<String>> {
        t.children()
            .filter(|r| r.has_tag_name("tr"))
            .map(|r| {
                r.children()
                    .filter(|c| c.is_element())
                    .map(|c| {
                        c.descendants()
                            .filter(|x| x.is_text())
                            .filter_map(|x| x.text())
                            .collect::<String>()
                    })
                    .collect()
            })
            .collect()
    };
    let find = |head: &str| -> Vec<Vec<String>> {
        let t = tables
            .iter()
            .find(|t| rows_of(t)[0].iter().any(|h| h == head))
            .unwrap_or_else(|| panic!("no table with {head}"));
        rows_of(t)[1..].to_vec()
    };
    // Each suspect with what became of it.
    let suspects = find("after the retest");
    assert_eq!(suspects.len(), 2);
    assert_eq!(suspects[0], ["host", "h2", "", "confirmed by the retest"]);
    assert_eq!(
        suspects[1][0..2],
        [
            "link".to_owned(),
            format!("h0, {}", EVIL.replace('\u{1}', "\u{FFFD}"))
        ]
    );
    assert_eq!(suspects[1][3], "cleared: no such verdict after the retest");
    // Who met whom.
    let rounds = find("round");
    assert_eq!(
        rounds,
        [
            ["1", "h2 \u{2194} h0"],
            [
                "2",
                &format!("h2 \u{2194} {}", EVIL.replace('\u{1}', "\u{FFFD}"))
            ]
        ]
    );
    // Each client run beside the first pass (median 80 Gb/s).
    let runs = find("first pass");
    assert_eq!(runs.len(), 4, "client sides only: {runs:?}");
    assert_eq!(
        runs[0],
        ["0", "h2 \u{2192} h0", "40.0 (0.50x)", "30.0 (0.38x)"]
    );
    assert_eq!(
        runs[1][2..],
        ["80.0 (1.00x)".to_owned(), "80.0 (1.00x)".to_owned()]
    );
    assert_eq!(runs[2][3], "failed: accept: timed out");
    assert_eq!(
        runs[3][2..],
        ["failed".to_owned(), "70.0 (0.88x)".to_owned()]
    );
    // A cell the schedule left out reads so, not failed.
    let mut left_out = retested();
    left_out["pairs"]["not_measured"] = json!([[1, 2]]);
    assert!(render(&left_out).contains("<td class=\"num\">not measured</td>"));
    assert!(html.contains(&format!("background:{}", svg::ratio_colour(30.0 / 80.0))));
    // The verdict says the retest confirmed it.
    assert_eq!(find("retested")[0][5], "yes, confirmed");
    // Without `retest` there is no section.
    assert!(!render(&today()).contains("id=\"retest\""));
}

#[test]
fn a_retest_of_the_wrong_shape_is_shown_as_missing() {
    let mut d = today();
    d["retest"] = json!({"suspects": "x", "rounds": [[["a", 1]], 7], "runs": {"no": 1}});
    let html = render(&d);
    check_page(&html);
    assert!(html.contains("id=\"retest\""));
    assert!(html.contains("0 suspect(s)"), "{html}");
}

/// The median by sorting, as the small heatmap computes it.
fn sorted_median(v: &[f64]) -> Option<f64> {
    median(v.to_vec())
}

#[test]
fn the_histogram_median_is_the_sorted_one() {
    let mut x: u64 = 7;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    for len in [1usize, 2, 3, 10, 101, 1000, 4096] {
        let v: Vec<f64> = (0..len).map(|_| 80.0 + 40.0 * next()).collect();
        let got =
            image::median_of(&|sink: &mut dyn FnMut(f64)| v.iter().copied().for_each(&mut *sink));
        assert_eq!(got, sorted_median(&v), "{len} values");
    }
    // Ties, a constant, non-finite values skipped, nothing.
    let v = [5.0, 5.0, 5.0, 1.0, f64::NAN, f64::INFINITY];
    let got = image::median_of(&|sink: &mut dyn FnMut(f64)| v.iter().copied().for_each(&mut *sink));
    assert_eq!(got, Some(5.0));
    let got = image::median_of(&|sink: &mut dyn FnMut(f64)| {
        [3.0; 4].iter().copied().for_each(&mut *sink)
    });
    assert_eq!(got, Some(3.0));
    assert_eq!(image::median_of(&|_: &mut dyn FnMut(f64)| {}), None);
}

#[test]
fn base64_is_rfc4648() {
    for (raw, want) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(image::base64(raw.as_bytes()), want);
    }
    assert_eq!(image::base64(&[0xff, 0xfe, 0x00]), "//4A");
}

#[test]
fn the_image_is_at_most_a_thousand_pixels_a_side() {
    use image::Layout;
    assert_eq!(
        Layout::of(301),
        Layout {
            block: 1,
            scale: 3,
            blocks: 301
        }
    );
    assert_eq!(
        Layout::of(1000),
        Layout {
            block: 1,
            scale: 1,
            blocks: 1000
        }
    );
    assert_eq!(
        Layout::of(1001),
        Layout {
            block: 2,
            scale: 1,
            blocks: 501
        }
    );
    let l = Layout::of(10_000);
    assert_eq!((l.block, l.blocks, l.side()), (10, 1000, 1000));
}

/// Decodes a PNG of the heatmap: (width, palette RGB of each pixel).
fn decode_png(bytes: &[u8]) -> (usize, Vec<[u8; 3]>) {
    let mut dec = png::Decoder::new(bytes);
    dec.set_transformations(png::Transformations::EXPAND);
    let mut reader = dec.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let px = buf[..info.buffer_size()]
        .chunks_exact(3)
        .map(|c| [c[0], c[1], c[2]])
        .collect();
    (info.width as usize, px)
}

fn rgb(hex: &str) -> [u8; 3] {
    let c = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap();
    [c(1), c(3), c(5)]
}

#[test]
fn a_block_of_cells_shows_its_worst_and_the_suspects_are_marked() {
    // 2500 hosts: blocks of 3 x 3 cells a pixel. One failed cell and one
    // cell at half the rate must both show; host 1234 is marked.
    let n = 2500;
    let cell = |i: usize, j: usize| match (i, j) {
        _ if i == j => image::Px::Diagonal,
        (100, 2000) => image::Px::Failed,
        (1500, 7) => image::Px::Ratio(0.5),
        _ => image::Px::Ratio(1.0),
    };
    let mut marked = vec![false; n];
    marked[1234] = true;
    let send: Vec<Option<f64>> = (0..n)
        .map(|i| Some(if i == 42 { 0.5 } else { 1.0 }))
        .collect();
    let recv = vec![None; n];
    let p = image::Picture {
        n,
        cell: &cell,
        marked: &marked,
        send: &send,
        recv: &recv,
    };
    let (l, bytes) = image::png(&p).unwrap();
    assert_eq!((l.block, l.blocks), (3, 834));
    let (w, px) = decode_png(&bytes);
    let (iw, ih) = l.size();
    assert_eq!((w, px.len()), (iw, iw * ih));
    let at = |x: usize, y: usize| px[y * w + x];
    let cell_px = |i: usize, j: usize| at(8 + j / 3, 8 + i / 3);
    assert_eq!(cell_px(100, 2000), rgb(svg::FAILED));
    assert_eq!(cell_px(1500, 7), rgb(&svg::ratio_colour(0.5)));
    assert_eq!(cell_px(1500, 10), rgb(&svg::ratio_colour(1.0)));
    // A block on the diagonal shows its measured cells, not the diagonal.
    assert_eq!(cell_px(0, 0), rgb(&svg::ratio_colour(1.0)));
    assert_eq!(cell_px(4, 4), rgb(&svg::ratio_colour(1.0)));
    // Marks: left of row 1234's pixel row, above its column; none at 10.
    let mark = rgb(image::MARK_COLOUR);
    assert_eq!(at(0, 8 + 1234 / 3), mark);
    assert_eq!(at(8 + 1234 / 3, 0), mark);
    assert_ne!(at(0, 8 + 10 / 3), mark);
    // The send strip: host 42 at half, the receive strip empty (white).
    let sx = 8 + l.side() + 6;
    assert_eq!(at(sx + 2, 8 + 42 / 3), rgb(&svg::ratio_colour(0.5)));
    assert_eq!(at(sx + 2, 8 + 50 / 3), rgb(&svg::ratio_colour(1.0)));
    assert_eq!(at(sx + 12 + 2, 8 + 42 / 3), rgb("#ffffff"));
}

#[test]
fn many_stages_and_rows_are_summarised() {
    let mut d = full();
    // 40 hosts' NCCL stages, one of them slow, and the cluster's.
    let mut stages: Vec<Value> = (0..40)
        .map(|i| {
            json!({"name": format!("host n{i}"), "scope": "host", "hosts": [format!("n{i}")],
                   "collective": "all_reduce", "status": "ok", "error": null,
                   "rows": rows(if i == 17 { 0.5 } else { 2.0 }),
                   "expected_busbw": null, "expected_why": "", "baseline_rows": null})
        })
        .collect();
    stages[17]["status"] = json!("fail");
    stages.push(d["nccl"]["stages"][2].clone());
    d["nccl"]["stages"] = json!(stages);
    // 500 baseline rows, 3 under the baseline; 400 traffic rows, one failed.
    let brow = |k: usize, status: &str| {
        json!({"status": status, "client": format!("n{k}"), "server": "n0", "gbps": 90.0,
               "baseline_gbps": 90.0, "ratio": if status == "ok" {1.0} else {0.5}, "note": ""})
    };
    d["baseline"]["rows"] = json!(
        (0..500)
            .map(|k| brow(k, if k % 200 == 7 { "fail" } else { "ok" }))
            .collect::<Vec<_>>()
    );
    let trow = |k: usize, verdict: &str| {
        json!({"host": format!("n{k}"), "nic": "erdma_0", "stage": "cluster",
               "tx_bytes": 1, "rx_bytes": 1, "expected_bytes": 1, "errors": {},
               "verdict": verdict, "why": format!("WHY-{k}")})
    };
    d["traffic"]["rows"] = json!(
        (0..400)
            .map(|k| trow(k, if k == 399 { "fail" } else { "ok" }))
            .collect::<Vec<_>>()
    );
    let html = render(&d);
    check_page(&html);
    let doc = parse(&html);
    // The cluster's stage and the slowest hosts: at most 12 curves, n17 in.
    let curves = count(&doc, "polyline", "curve");
    assert!(curves <= 12 && curves > 2, "{curves} curves");
    assert!(
        html.contains("<title>host n17</title>"),
        "the slow host's curve"
    );
    assert!(html.contains("39 per-host stages"), "ok host stages folded");
    // Baseline: the three failing rows, then a line of counts.
    assert_eq!(html.matches("n7 &#8594; n0").count(), 1);
    assert!(html.contains("n407 &#8594; n0"));
    assert!(html.contains("500 rows (497 ok, 3 fail)"), "{html}");
    // Traffic: the failed row (the last) is among those shown.
    assert!(html.contains("WHY-399"));
    assert!(html.contains("400 rows (399 ok, 1 fail)"));
    assert!(
        !html.contains("WHY-398"),
        "ok rows past the first 199 are left out"
    );
}

#[test]
fn host_medians_are_each_rows_and_columns() {
    // 130 hosts: three tiles of columns; row i, column j holds i * 1000 + j
    // (null on the diagonal and at (5, 6)).
    let n = 130;
    let m: Value = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j || (i, j) == (5, 6) {
                        Value::Null
                    } else {
                        json!((i * 1000 + j) as f64)
                    }
                })
                .collect::<Value>()
        })
        .collect();
    let (send, recv) = host_medians(&m, n);
    let naive =
        |f: &dyn Fn(usize) -> Option<f64>| sorted_median(&(0..n).filter_map(f).collect::<Vec<_>>());
    for i in 0..n {
        let row = naive(&|j| at(&m, i, j));
        let col = naive(&|j| at(&m, j, i));
        assert_eq!(send[i], row, "row {i}");
        assert_eq!(recv[i], col, "column {i}");
    }
    assert_eq!(recv[0], Some(65000.0));
    assert_eq!(send[129], Some(129_000.0 + 64.0));
}

#[test]
fn the_marked_suspects_are_the_hosts_that_stand_out() {
    let names: Vec<String> = (0..60).map(|i| format!("n{i}")).collect();
    let link =
        |a: usize, b: usize| json!({"kind": "link", "hosts": [format!("n{a}"), format!("n{b}")]});
    let mut verdicts: Vec<Value> = (1..31).map(|j| link(0, j)).collect();
    verdicts.push(json!({"kind": "host", "hosts": ["n40"]}));
    verdicts.push(link(50, 51));
    let mut d = json!({"hosts": names.iter().map(|n| json!({"host": n})).collect::<Vec<_>>(),
                       "verdicts": verdicts});
    let on = |d: &Value| -> Vec<usize> {
        suspects(d, &names)
            .iter()
            .enumerate()
            .filter(|(_, m)| **m)
            .map(|(i, _)| i)
            .collect()
    };
    let marked = on(&d);
    // n0 (in 30 verdicts) and n40 (a host verdict); not the partners.
    assert_eq!(marked, [0, 40]);
    // Few hosts named: every one; and the retest's suspects.
    d["verdicts"] = json!([link(50, 51)]);
    d["retest"] = json!({"suspects": [{"kind": "nic", "hosts": [7]}]});
    assert_eq!(on(&d), [7, 50, 51]);
}
