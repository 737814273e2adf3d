//! The retest section of report.html: which first-pass suspects were
//! measured again, who met whom in each retest round, each retest run
//! beside the first pass's number for the same cell, and what became of
//! each suspect (confirmed, not confirmed, cleared). From the document's
//! `retest` (its plan and runs), `pairs` and `verdicts` keys only.

use std::fmt::Write as _;

use serde_json::Value;

use super::{esc, items, label, labels, median, plain, svg};
use crate::cluster::retest;

/// One suspect's fate after the retest: (badge class, words).
fn outcome(doc: &Value, kind: &Value, hosts: &[String], nic: &Value) -> (&'static str, String) {
    let mut want = hosts.to_vec();
    want.sort();
    let same = |v: &&Value| {
        let mut have: Vec<String> = items(&v["hosts"]).iter().map(plain).collect();
        have.sort();
        v["source"] != "nccl" && v["kind"] == *kind && have == want && v["nic"] == *nic
    };
    let Some(v) = items(&doc["verdicts"]).iter().find(same) else {
        return ("ok", retest::suspect_words(None).into());
    };
    // `confirmed` is written with the retest; `status` fail says the same.
    let confirmed = v["confirmed"]
        .as_bool()
        .unwrap_or(v["status"] == "fail" && v["kind"] != "lost");
    let flag = |k: &str| v[k].as_bool().unwrap_or(false);
    let words = retest::suspect_words(Some((confirmed, flag("seen_again"), flag("retested"))));
    (if confirmed { "fail" } else { "warn" }, words.into())
}

/// The first pass of one rail: `gbps[c][s]` of its matrix and each
/// client run's number scaled by the flows that shared its port (a
/// `--budget` round runs several at once, a retest run one).
struct FirstPass<'a> {
    gbps: &'a Value,
    runs: Vec<(usize, usize, f64)>,
    /// The first run of each cell: its index in `runs`.
    by_cell: std::collections::HashMap<(usize, usize), usize>,
}

impl FirstPass<'_> {
    fn of<'d>(doc: &'d Value, rail: &Value) -> FirstPass<'d> {
        let p = &doc["pairs"];
        let gbps = items(&p["rails"])
            .iter()
            .find(|r| r["rail"] == *rail)
            .map_or(&p["gbps"], |r| &r["gbps"]);
        let runs = items(&p["runs"])
            .iter()
            .filter(|r| r["role"] == "client" && r["rail"] == *rail)
            .filter_map(|r| {
                let g = r["gbps"].as_f64()? * r["share"].as_f64().unwrap_or(1.0).max(1.0);
                Some((
                    r["client"].as_u64()? as usize,
                    r["server"].as_u64()? as usize,
                    g,
                ))
            })
            .collect::<Vec<_>>();
        let mut by_cell = std::collections::HashMap::new();
        for (k, r) in runs.iter().enumerate() {
            by_cell.entry((r.0, r.1)).or_insert(k);
        }
        FirstPass {
            gbps,
            runs,
            by_cell,
        }
    }

    /// The cell's number (its run's, scaled; else the matrix's).
    fn at(&self, c: usize, s: usize) -> Option<f64> {
        self.by_cell
            .get(&(c, s))
            .map(|&k| self.runs[k].2)
            .or_else(|| super::at(self.gbps, c, s))
    }

    /// The median of the first pass (its runs, else its matrix).
    fn median(&self) -> Option<f64> {
        if self.runs.is_empty() {
            // Without holding the n x n values.
            return super::image::median_of(&|sink: &mut dyn FnMut(f64)| {
                for row in items(self.gbps) {
                    items(row)
                        .iter()
                        .filter_map(Value::as_f64)
                        .for_each(&mut *sink);
                }
            })
            .filter(|m| *m > 0.0);
        }
        median(self.runs.iter().map(|r| r.2).collect()).filter(|m| *m > 0.0)
    }
}

/// A number as a table cell coloured by its ratio to `reference` (the
/// heatmap's colours); "-" when there is none.
fn coloured(g: Option<f64>, reference: Option<f64>, what: &str) -> String {
    let Some(g) = g else {
        return format!("<td class=\"num\">{}</td>", esc(what));
    };
    match reference {
        Some(m) => {
            let fill = svg::ratio_colour(g / m);
            format!(
                "<td class=\"num rt\" style=\"background:{fill};color:{}\">{} ({:.2}x)</td>",
                svg::ink(&fill),
                svg::gbps_text(g),
                g / m
            )
        }
        None => format!("<td class=\"num\">{}</td>", svg::gbps_text(g)),
    }
}

/// The section (empty when the document has no `retest`).
pub fn section(doc: &Value) -> String {
    let rt = &doc["retest"];
    if !rt.is_object() {
        return String::new();
    }
    let names = labels(doc);
    let suspects = items(&rt["suspects"]);
    let rounds = items(&rt["rounds"]);
    let pairs: usize = rounds.iter().map(|r| items(r).len()).sum();
    let mut s = format!(
        "<h2 id=\"retest\">Retest</h2><p>The first pass named {} suspect(s); the retest measured \
         them again in {} round(s), {} pair(s), both directions, one partner per host, against \
         {} host(s) judged good{}. A verdict the retest measured again against a good host and \
         still found is confirmed (a failure); any other stays a warning.</p>",
        suspects.len(),
        rounds.len(),
        pairs,
        esc(&plain(&rt["good"])),
        match rt["left"].as_u64() {
            Some(k) if k > 0 => format!("; {k} request(s) did not fit the rounds"),
            _ => String::new(),
        }
    );
    s.push_str(&suspect_table(doc, suspects, &names));
    s.push_str(&round_table(rounds, &names));
    s.push_str(&run_table(doc, &names));
    s
}

fn suspect_table(doc: &Value, suspects: &[Value], names: &[String]) -> String {
    if suspects.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "<h3>Suspects of the first pass</h3><table><tr><th>kind</th><th>hosts</th><th>NIC</th>\
         <th>after the retest</th></tr>",
    );
    for sp in suspects.iter().take(super::MAX_ROWS) {
        let hosts: Vec<String> = items(&sp["hosts"])
            .iter()
            .filter_map(Value::as_u64)
            .map(|h| label(names, h as usize))
            .collect();
        let (class, words) = outcome(doc, &sp["kind"], &hosts, &sp["nic"]);
        let _ = write!(
            s,
            "<tr><td><b>{}</b></td><td>{}</td><td>{}</td>\
             <td><span class=\"badge b-{class}\">{}</span></td></tr>",
            esc(&plain(&sp["kind"])),
            esc(&hosts.join(", ")),
            esc(&plain(&sp["nic"])),
            esc(&words)
        );
    }
    s.push_str("</table>");
    s
}

fn round_table(rounds: &[Value], names: &[String]) -> String {
    if rounds.is_empty() {
        return "<p>No retest round could be held (no host judged good, or no round \
                allowed).</p>"
            .into();
    }
    let mut s = String::from(
        "<h3>Retest rounds</h3><table><tr><th>round</th><th>who met whom (both directions)</th></tr>",
    );
    for (k, r) in rounds.iter().enumerate().take(super::MAX_ROWS) {
        let met: Vec<String> = items(r)
            .iter()
            .filter_map(|p| Some((p[0].as_u64()? as usize, p[1].as_u64()? as usize)))
            .map(|(a, b)| {
                format!(
                    "{} &#8596; {}",
                    esc(&label(names, a)),
                    esc(&label(names, b))
                )
            })
            .collect();
        let met = if met.len() > 6 {
            format!(
                "<details><summary>{} pairs: {}, &#8230;</summary>{}</details>",
                met.len(),
                met[..3].join(", "),
                met.join(", ")
            )
        } else {
            met.join(", ")
        };
        let _ = write!(s, "<tr><td>{}</td><td>{met}</td></tr>", k + 1);
    }
    s.push_str("</table>");
    s
}

fn run_table(doc: &Value, names: &[String]) -> String {
    let runs: Vec<&Value> = items(&doc["retest"]["runs"])
        .iter()
        .filter(|r| r["role"] == "client")
        .collect();
    if runs.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "<h3>Retest runs against the first pass</h3><p class=\"meta\">Gb/s of the client (scaled \
         to the port where several flows shared it), coloured by the ratio to the first pass's \
         median on that NIC, as the heatmap is.</p><table><tr><th>NIC</th>\
         <th>client &#8594; server</th><th>first pass</th><th>retest</th></tr>",
    );
    // Each rail's first pass and median once (a rail's matrix is n x n).
    let mut firsts: Vec<(&Value, FirstPass, Option<f64>)> = Vec::new();
    let unmeasured = super::not_measured(&doc["pairs"]);
    let total = runs.len();
    for r in runs.into_iter().take(super::MAX_ROWS) {
        let (Some(c), Some(sv)) = (r["client"].as_u64(), r["server"].as_u64()) else {
            continue;
        };
        let (c, sv) = (c as usize, sv as usize);
        let k = match firsts.iter().position(|f| *f.0 == r["rail"]) {
            Some(k) => k,
            None => {
                let first = FirstPass::of(doc, &r["rail"]);
                let m = first.median();
                firsts.push((&r["rail"], first, m));
                firsts.len() - 1
            }
        };
        let (_, first, reference) = &firsts[k];
        let reference = *reference;
        let left_out = unmeasured.contains(&(c, sv));
        let before = if left_out { "not measured" } else { "failed" };
        let now = r["gbps"]
            .as_f64()
            .map(|g| g * r["share"].as_f64().unwrap_or(1.0).max(1.0));
        let failed = match plain(&r["error"]) {
            e if e.is_empty() => "failed".to_owned(),
            e => format!("failed: {e}"),
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{} &#8594; {}</td>{}{}</tr>",
            r["rail"]
                .as_u64()
                .map_or("cross".to_owned(), |k| k.to_string()),
            esc(&label(names, c)),
            esc(&label(names, sv)),
            coloured(first.at(c, sv), reference, before),
            coloured(now, reference, &failed)
        );
    }
    if total > super::MAX_ROWS {
        let _ = write!(
            s,
            "<tr><td colspan=\"4\">and {} more runs: cluster.json has them all (<code>retest.runs</code>)</td></tr>",
            total - super::MAX_ROWS
        );
    }
    s.push_str("</table>");
    s
}
