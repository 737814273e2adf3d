//! `report.html` under `--out`: the cluster's report as one self-contained
//! page a person reads (inline CSS and SVG, no script, nothing fetched).
//!
//! It renders the JSON document (`cluster.json`, [`super::render_json`]'s
//! output) and nothing else, so it follows the document's contract rather
//! than the stages' types: every key is optional, a section is shown when
//! its key is present (`pairs`, `pairs.rails`, `baseline`, `nccl`,
//! `traffic`, `verdicts`, `retest`), and a value of the wrong type is shown as
//! missing, never a panic. Every string of the document is escaped (host
//! names come from the hosts). The page is well-formed XML as well as
//! HTML, so tests read it with an XML parser.

use std::fmt::Write as _;

use serde_json::Value;

mod image;
mod retest;
mod svg;
use svg::{Cell, Series};

#[cfg(test)]
mod tests;

/// Text made safe for HTML and XML, in content and in quoted attributes;
/// characters XML forbids (controls) become U+FFFD.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            '\t' | '\n' | '\r' => o.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => o.push('\u{FFFD}'),
            c => o.push(c),
        }
    }
    o
}

/// A value as plain text: strings as they are, numbers and the rest as JSON,
/// null as empty.
fn plain(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A string value that says something (none when absent, not a string or
/// empty: a stage writes "" for "no command").
fn text(v: &Value) -> Option<&str> {
    v.as_str().filter(|s| !s.trim().is_empty())
}

/// The elements of an array value (none when it is not one).
fn items(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// A status as a coloured badge; unknown words get a neutral colour.
fn badge(status: &str) -> String {
    let class = match status {
        "ok" => "ok",
        "warn" | "cannot prove" => "warn",
        "fail" => "fail",
        "skip" => "skip",
        _ => "other",
    };
    format!(r#"<span class="badge b-{class}">{}</span>"#, esc(status))
}

/// A shell word, quoted when it needs to be.
fn sh(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./,:=@%+".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A byte count with its unit (`1.50 GiB`); "not counted" when absent.
fn bytes(v: &Value) -> String {
    let Some(b) = v.as_f64() else {
        return "not counted".into();
    };
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let k = (0..UNITS.len())
        .rev()
        .find(|&k| b >= 1024f64.powi(k as i32))
        .unwrap_or(0);
    if k == 0 {
        format!("{b:.0} B")
    } else {
        format!("{:.2} {}", b / 1024f64.powi(k as i32), UNITS[k])
    }
}

/// The ranks' names as the report shows them (`label`, else `rank N`).
fn labels(doc: &Value) -> Vec<String> {
    items(&doc["hosts"])
        .iter()
        .enumerate()
        .map(|(i, h)| {
            h["label"]
                .as_str()
                .or(h["host"].as_str())
                .map_or_else(|| format!("rank {i}"), str::to_owned)
        })
        .collect()
}

/// Rank `i`'s label, or `rank i` when the document has no such host.
fn label(labels: &[String], i: usize) -> String {
    labels
        .get(i)
        .cloned()
        .unwrap_or_else(|| format!("rank {i}"))
}

/// Writes the whole page for the document.
pub fn render(doc: &Value) -> String {
    let mut body = String::new();
    body.push_str(&summary(doc));
    body.push_str(&hosts(doc));
    body.push_str(&verdicts(doc));
    body.push_str(&retest::section(doc));
    body.push_str(&problems(doc));
    body.push_str(&pairs(doc));
    body.push_str(&latency(doc));
    body.push_str(&baseline(doc));
    body.push_str(&nccl(doc));
    body.push_str(&traffic(doc));
    let title = format!("erdma-cluster report: {}", plain(&doc["status"]));
    format!(
        "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head><meta charset=\"utf-8\"/>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/><title>{}</title>\
         <style>{CSS}</style></head><body>{body}<footer>{}</footer></body></html>\n",
        esc(&title),
        esc(&format!(
            "Written by {} {} on {} at {}. The JSON behind this page is cluster.json in the same directory.",
            plain(&doc["tool"]),
            plain(&doc["version"]),
            plain(&doc["host"]),
            plain(&doc["date"])
        ))
    )
}

const CSS: &str = "
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;color:#1b1b1b;margin:0 auto;max-width:1120px;padding:18px 24px;background:#fff}
h1{font-size:26px;margin:4px 0 6px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
.verdict{border-radius:8px;padding:14px 18px;margin:10px 0 6px;border:1px solid #ccc}
.v-ok{background:#e8f5e3;border-color:#91cf60}.v-warn{background:#fff6dc;border-color:#f2c94c}.v-fail{background:#fde8e6;border-color:#d73027}.v-other{background:#eef1f5}
.verdict .big{font-size:22px;font-weight:700}.verdict ul{margin:6px 0 0 0;padding-left:20px}
.meta{color:#555;font-size:13px}.muted{color:#666;fill:#666}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f5f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;border-radius:4px;padding:0 7px;font-size:12px;font-weight:600;color:#fff}
.b-ok{background:#2e8b3a}.b-warn{background:#c98a00}.b-fail{background:#c0392b}.b-skip{background:#8a8a8a}.b-other{background:#5a6b80}
code,pre{font:12px/1.4 ui-monospace,'DejaVu Sans Mono',monospace}pre{background:#f6f8fa;border:1px solid #e1e4e8;padding:6px 8px;margin:2px 0;white-space:pre-wrap;word-break:break-all}
svg text{font:11px system-ui,'DejaVu Sans',sans-serif;fill:#222}svg text.axis{font-size:12px;fill:#444}svg text.cellv{font-size:12px;font-weight:600}
.swatch{display:inline-block;width:22px;height:4px;vertical-align:middle;margin:0 6px 0 14px}.swatch.dash{border-top:3px dashed;height:0}
nav a{margin-right:12px}.heatmap-img{image-rendering:pixelated;display:block}.todo{margin-top:8px}.todo ol{margin:4px 0 0;padding-left:22px}details summary{cursor:pointer}footer{margin-top:30px;color:#777;font-size:12px}
";

/// The first thing on the page: the result and, in one line each, what is
/// wrong, then links to the sections.
fn summary(doc: &Value) -> String {
    let status = plain(&doc["status"]);
    let class = match status.as_str() {
        "ok" | "warn" | "fail" => status.as_str(),
        _ => "other",
    };
    let hosts = items(&doc["hosts"]);
    let mut names: Vec<&str> = hosts.iter().filter_map(|h| h["host"].as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut s = format!(
        r#"<h1>Cluster check: {} host{}, {} rank{}</h1><p class="meta">erdma-cluster {} &#183; {} &#183; <code>{}</code>{}</p>"#,
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" },
        esc(&plain(&doc["version"])),
        esc(&plain(&doc["date"])),
        esc(&command_line(doc)),
        doc["predicted_wall_s"]
            .as_f64()
            .map_or(String::new(), |p| format!(
                " &#183; schedule estimate {} s",
                svg::trim_num(p)
            ))
    );
    let word = match class {
        "ok" => "OK: ready, every check and stage passed",
        "warn" => "WARN: usable, read the warnings below",
        "fail" => "FAIL: not ready, something failed",
        _ => "result unknown",
    };
    let _ = write!(
        s,
        r#"<div class="verdict v-{class}"><div class="big">{word}</div>"#
    );
    let _ = write!(
        s,
        r#"<div class="meta">exit status {}</div>"#,
        esc(&plain(&doc["exit_status"]))
    );
    let points = headline(doc);
    if !points.is_empty() {
        s.push_str("<ul>");
        for p in points {
            let _ = write!(s, "<li>{p}</li>");
        }
        s.push_str("</ul>");
    }
    s.push_str("<div class=\"todo\"><b>What to do</b><ol>");
    for t in todo(doc) {
        let _ = write!(s, "<li>{t}</li>");
    }
    s.push_str("</ol></div></div><nav>");
    for (id, key, title) in [
        ("hosts", "hosts", "Hosts"),
        ("verdicts", "verdicts", "Verdicts"),
        ("retest", "retest", "Retest"),
        ("problems", "problems", "Problems"),
        ("pairs", "pairs", "NIC pairs"),
        ("baseline", "baseline", "Baseline"),
        ("nccl", "nccl", "NCCL"),
        ("traffic", "traffic", "Traffic proof"),
    ] {
        if !doc[key].is_null() {
            let _ = write!(s, "<a href=\"#{id}\">{title}</a>");
        }
    }
    s.push_str("</nav>");
    s
}

/// The command that ran, as one line.
fn command_line(doc: &Value) -> String {
    let words: Vec<String> = items(&doc["command"]).iter().map(plain).collect();
    words.iter().map(|w| sh(w)).collect::<Vec<_>>().join(" ")
}

/// The verdicts the banner names by themselves; the rest are counted and
/// shown on demand.
const TOP_VERDICTS: usize = 5;
/// Rows of a long table shown; the others are counted (cluster.json has
/// them all).
const MAX_ROWS: usize = 200;

/// The verdicts, the confirmed (failing) ones first, in the document's
/// order otherwise.
fn ranked_verdicts(doc: &Value) -> Vec<&Value> {
    let mut list: Vec<&Value> = items(&doc["verdicts"]).iter().collect();
    let rank = |v: &Value| {
        if v["status"] == "fail" || v["confirmed"] == Value::Bool(true) {
            0
        } else {
            1
        }
    };
    list.sort_by_key(|v| rank(v));
    list
}

/// `k` things, `1 thing` or `2 things`.
fn count(k: usize, one: &str, many: &str) -> String {
    format!("{k} {}", if k == 1 { one } else { many })
}

/// (name, verdicts naming it), the most named first, then by name.
fn most_named(list: &[&Value]) -> Vec<(String, usize)> {
    let mut by: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for v in list {
        for h in items(&v["hosts"]) {
            *by.entry(plain(h)).or_default() += 1;
        }
    }
    let mut out: Vec<(String, usize)> = by.into_iter().collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// (kind, count) of the verdicts, the commonest first.
fn kinds(list: &[&Value]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for v in list {
        let k = plain(&v["kind"]);
        match out.iter_mut().find(|(x, _)| *x == k) {
            Some(e) => e.1 += 1,
            None => out.push((k, 1)),
        }
    }
    out.sort_by_key(|b| std::cmp::Reverse(b.1));
    out
}

/// The verdicts in the banner: their count by kind and the hosts they name
/// most, the first few in a line each, the rest on demand (HTML).
fn verdict_points(doc: &Value) -> Vec<String> {
    let list = ranked_verdicts(doc);
    if list.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    if list.len() > TOP_VERDICTS {
        let by_kind: Vec<String> = kinds(&list)
            .iter()
            .map(|(k, c)| format!("{c} {}", esc(k)))
            .collect();
        let confirmed = list.iter().filter(|v| v["status"] == "fail").count();
        let named = most_named(&list);
        let top: Vec<String> = named
            .iter()
            .enumerate()
            .filter(|(k, (_, c))| *k == 0 || *c > 1)
            .map(|(_, x)| x)
            .take(3)
            .map(|(h, c)| format!("<b>{}</b> ({c})", esc(h)))
            .collect();
        out.push(format!(
            "<b>{}</b> ({}), {} confirmed, naming {}; named most: {}",
            count(list.len(), "verdict", "verdicts"),
            by_kind.join(", "),
            confirmed,
            count(named.len(), "host", "hosts"),
            top.join(", ")
        ));
    }
    for v in list.iter().take(TOP_VERDICTS) {
        out.push(verdict_line(v));
    }
    let rest = &list[TOP_VERDICTS.min(list.len())..];
    if !rest.is_empty() {
        let mut more = format!(
            "<details><summary>{} more (all of them under <a href=\"#verdicts\">Verdicts</a>)</summary><ul>",
            count(rest.len(), "verdict", "verdicts")
        );
        for v in rest.iter().take(MAX_ROWS) {
            let _ = write!(more, "<li>{}</li>", verdict_line(v));
        }
        if rest.len() > MAX_ROWS {
            let _ = write!(more, "<li>and {} more</li>", rest.len() - MAX_ROWS);
        }
        more.push_str("</ul></details>");
        out.push(more);
    }
    out
}

/// What to do about the result, most urgent first (HTML, escaped).
fn todo(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let list = ranked_verdicts(doc);
    let confirmed: Vec<&Value> = list
        .iter()
        .copied()
        .filter(|v| v["status"] == "fail")
        .collect();
    if !confirmed.is_empty() {
        let named = most_named(&confirmed);
        let hosts: Vec<String> = named.iter().take(8).map(|(h, _)| esc(h)).collect();
        out.push(format!(
            "Take out of service and repair what the {} name{}: {}{} (<code>--drain</code> prints the commands).",
            count(confirmed.len(), "confirmed verdict", "confirmed verdicts"),
            if confirmed.len() == 1 { "s" } else { "" },
            hosts.join(", "),
            if named.len() > 8 {
                format!(" and {} more", named.len() - 8)
            } else {
                String::new()
            }
        ));
    }
    let unconfirmed = list.len() - confirmed.len();
    if unconfirmed > 0 {
        let named = most_named(&list);
        let lead = match named.first() {
            Some((h, c)) if *c > 1 && named.get(1).is_none_or(|x| x.1 * 2 <= *c) => {
                format!(" {} is named in {c} of them: look at it first", esc(h))
            }
            _ => String::new(),
        };
        out.push(format!(
            "{} not confirmed by a retest: measure those hosts again before acting.{lead}",
            count(unconfirmed, "verdict is", "verdicts are")
        ));
    }
    let problems: Vec<&Value> = items(&doc["problems"])
        .iter()
        .chain(items(&doc["across"]))
        .collect();
    let mut sorted = problems.clone();
    sorted.sort_by_key(|p| if p["status"] == "fail" { 0 } else { 1 });
    for p in sorted.iter().take(3) {
        out.push(format!(
            "Fix <code>{}</code> on {}: {}",
            esc(&plain(&p["id"])),
            count(items(&p["hosts"]).len(), "host", "hosts"),
            esc(&plain(&p["fix"]))
        ));
    }
    if problems.len() > 3 {
        out.push(format!(
            "{} more under <a href=\"#problems\">Problems</a>.",
            count(problems.len() - 3, "problem", "problems")
        ));
    }
    let failed = failed_pairs(doc).len();
    if failed > 0 {
        out.push(format!(
            "Rerun the {} with the commands under <a href=\"#pairs\">NIC pairs</a> once fixed.",
            count(failed, "failed pair direction", "failed pair directions")
        ));
    }
    if items(&doc["nccl"]["stages"])
        .iter()
        .any(|s| s["status"] == "fail")
    {
        out.push(
            "Rerun the failed NCCL stages with the commands under <a href=\"#nccl\">NCCL</a>."
                .into(),
        );
    }
    if out.is_empty() {
        out.push(match doc["status"].as_str() {
            Some("ok") => "Nothing: the cluster is ready.".into(),
            _ => "Read the sections below.".into(),
        });
    }
    out
}

/// What is wrong, one item per kind (HTML, escaped).
fn headline(doc: &Value) -> Vec<String> {
    let mut out = verdict_points(doc);
    let hosts = items(&doc["hosts"]);
    let bad = |st: &str| hosts.iter().filter(|h| h["status"] == st).count();
    if bad("fail") + bad("warn") > 0 {
        out.push(format!(
            "host checks: {} of {} ranks failed, {} warned",
            bad("fail"),
            hosts.len(),
            bad("warn")
        ));
    }
    let problems = items(&doc["problems"]).len() + items(&doc["across"]).len();
    if problems > 0 {
        out.push(format!(
            "{problems} problem{} (each listed once with its hosts and fix)",
            if problems == 1 { "" } else { "s" }
        ));
    }
    let failed_pairs = failed_pairs(doc).len();
    if failed_pairs > 0 {
        out.push(format!(
            "NIC pairs: {failed_pairs} pair direction(s) failed"
        ));
    }
    let b = &doc["baseline"];
    let under = items(&b["rows"])
        .iter()
        .filter(|r| r["status"] == "fail")
        .count();
    if under > 0 {
        out.push(format!(
            "baseline: {under} pair direction(s) under {} of the baseline",
            esc(&plain(&b["fail_below"]))
        ));
    }
    let stages = items(&doc["nccl"]["stages"]);
    let failed = stages.iter().filter(|s| s["status"] == "fail").count();
    if failed > 0 {
        out.push(format!(
            "NCCL: {failed} of {} stage(s) failed",
            stages.len()
        ));
    }
    let rows = items(&doc["traffic"]["rows"]);
    let count = |v: &str| rows.iter().filter(|r| r["verdict"] == v).count();
    if count("fail") > 0 {
        out.push(format!(
            "traffic proof: {} NIC/stage row(s) moved less than the collective needed",
            count("fail")
        ));
    }
    if count("cannot prove") > 0 {
        out.push(format!(
            "traffic proof: {} NIC/stage row(s) cannot be proven (counters missing)",
            count("cannot prove")
        ));
    }
    out
}

/// One verdict in a line: kind, hosts, NIC and why (HTML, escaped).
fn verdict_line(v: &Value) -> String {
    let hosts: Vec<String> = items(&v["hosts"]).iter().map(plain).collect();
    let nic = match &v["nic"] {
        Value::Null => String::new(),
        n => format!(" NIC {}", plain(n)),
    };
    format!(
        "<b>{}</b> {}{}: {}",
        esc(&plain(&v["kind"])),
        esc(&hosts.join(", ")),
        esc(&nic),
        esc(&plain(&v["why"]))
    )
}

/// Names as one table cell: a few in full, more as the first few with the
/// whole list on demand (`<details>`, no script). Escaped.
fn name_list(names: &[String]) -> String {
    const INLINE: usize = 6;
    if names.len() <= INLINE {
        return esc(&names.join(", "));
    }
    format!(
        "<details><summary>{} hosts: {}, &#8230;</summary>{}</details>",
        names.len(),
        esc(&names[..3].join(", ")),
        esc(&names.join(", "))
    )
}

/// The hosts, those with the same findings in one row: status, how many,
/// their names (on demand when many), counts of the checks and what names
/// them (the kinds of verdicts and the problems; their details are in
/// their sections). Failing rows first, then the biggest.
fn hosts(doc: &Value) -> String {
    use std::collections::HashMap;
    let hosts = items(&doc["hosts"]);
    if hosts.is_empty() {
        return String::new();
    }
    // What names each host, from one pass over the verdicts and problems.
    let mut notes: HashMap<String, Vec<String>> = HashMap::new();
    for v in items(&doc["verdicts"]) {
        let note = format!("{} verdict", plain(&v["kind"]));
        for h in items(&v["hosts"]) {
            notes.entry(plain(h)).or_default().push(note.clone());
        }
    }
    for key in ["problems", "across"] {
        for p in items(&doc[key]) {
            let note = format!("{} {}", plain(&p["status"]), plain(&p["id"]));
            for h in items(&p["hosts"]) {
                notes.entry(plain(h)).or_default().push(note.clone());
            }
        }
    }
    type Key = (String, [String; 4], String);
    let mut groups: Vec<(Key, Vec<String>)> = Vec::new();
    let mut index: HashMap<Key, usize> = HashMap::new();
    for (i, h) in hosts.iter().enumerate() {
        let name = plain(&h["host"]);
        let label = plain(&h["label"]);
        let mut mine: Vec<&String> = notes.get(&label).into_iter().flatten().collect();
        if name != label {
            mine.extend(notes.get(&name).into_iter().flatten());
        }
        // Each kind of note once, with its count.
        let mut counted: Vec<(&String, usize)> = Vec::new();
        for n in mine {
            match counted.iter_mut().find(|(x, _)| *x == n) {
                Some(e) => e.1 += 1,
                None => counted.push((n, 1)),
            }
        }
        let what: Vec<String> = counted
            .iter()
            .map(|(n, c)| {
                if *c > 1 {
                    format!("{n} x{c}")
                } else {
                    (*n).clone()
                }
            })
            .collect();
        let n = |k: &str| plain(&h["summary"][k]);
        let key: Key = (
            plain(&h["status"]),
            [n("ok"), n("warn"), n("fail"), n("skip")],
            what.join("; "),
        );
        let shown = format!(
            "{} (rank {})",
            if label.is_empty() { &name } else { &label },
            h["rank"].as_u64().unwrap_or(i as u64)
        );
        match index.get(&key) {
            Some(&g) => groups[g].1.push(shown),
            None => {
                index.insert(key.clone(), groups.len());
                groups.push((key, vec![shown]));
            }
        }
    }
    let severity = |st: &str| match st {
        "fail" => 0,
        "warn" => 1,
        "ok" => 3,
        _ => 2,
    };
    groups.sort_by(|a, b| {
        severity(&a.0.0)
            .cmp(&severity(&b.0.0))
            .then_with(|| a.0.2.is_empty().cmp(&b.0.2.is_empty()))
            .then_with(|| b.1.len().cmp(&a.1.len()))
    });
    let mut s = format!(
        "<h2 id=\"hosts\">Hosts</h2><p>{} in {}: hosts with the same status, check counts and \
         findings share a row.</p><table><tr><th>status</th><th>ranks</th><th>hosts</th>\
         <th>ok</th><th>warn</th><th>fail</th><th>skip</th><th>what names them</th></tr>",
        count(hosts.len(), "rank", "ranks"),
        count(groups.len(), "row", "rows")
    );
    let shown_groups = groups.len().min(MAX_ROWS);
    for ((status, counts, what), names) in &groups[..shown_groups] {
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            badge(status),
            names.len(),
            name_list(names),
            esc(&counts[0]),
            esc(&counts[1]),
            esc(&counts[2]),
            esc(&counts[3]),
            esc(what)
        );
    }
    if groups.len() > shown_groups {
        let left: usize = groups[shown_groups..].iter().map(|g| g.1.len()).sum();
        let _ = write!(
            s,
            "<tr><td colspan=\"8\">{} more rows ({}): cluster.json has every host</td></tr>",
            groups.len() - shown_groups,
            count(left, "rank", "ranks")
        );
    }
    s.push_str("</table>");
    s
}

/// The verdicts, each with its why and numbers.
fn verdicts(doc: &Value) -> String {
    let Some(list) = doc["verdicts"].as_array() else {
        return String::new();
    };
    let mut s = String::from("<h2 id=\"verdicts\">Verdicts</h2>");
    if list.is_empty() {
        s.push_str("<p>No verdict against any host, NIC or link.</p>");
        return s;
    }
    let list = ranked_verdicts(doc);
    let by_kind: Vec<String> = kinds(&list)
        .iter()
        .map(|(k, c)| format!("{c} {}", esc(k)))
        .collect();
    let _ = write!(
        s,
        "<p>{} ({}), the confirmed ones first.</p>",
        count(list.len(), "verdict", "verdicts"),
        by_kind.join(", ")
    );
    let head = "<table><tr><th>kind</th><th>hosts</th><th>NIC</th><th>why</th><th>numbers</th><th>retested</th></tr>";
    s.push_str(head);
    const FIRST: usize = 20;
    for (k, v) in list.iter().take(MAX_ROWS).enumerate() {
        if k == FIRST {
            let _ = write!(
                s,
                "</table><details><summary>{} more</summary>{head}",
                list.len() - FIRST
            );
        }
        let hosts: Vec<String> = items(&v["hosts"]).iter().map(plain).collect();
        let numbers: Vec<String> = v["numbers"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, n)| match n.as_f64().filter(|_| n.is_f64()) {
                Some(f) => format!("{k} = {}", svg::gbps_text(f)),
                None => format!("{k} = {}", plain(n)),
            })
            .collect();
        let _ = write!(
            s,
            "<tr><td><b>{}</b></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&plain(&v["kind"])),
            esc(&hosts.join(", ")),
            esc(&plain(&v["nic"])),
            esc(&plain(&v["why"])),
            esc(&numbers.join(", ")),
            match (&v["retested"], &v["confirmed"]) {
                (Value::Bool(true), Value::Bool(true)) => "yes, confirmed",
                (Value::Bool(true), Value::Bool(false)) => "yes, not confirmed",
                (Value::Bool(true), _) => "yes",
                (Value::Bool(false), _) => "no",
                _ => "",
            }
        );
    }
    if list.len() > MAX_ROWS {
        let _ = write!(
            s,
            "<tr><td colspan=\"6\">and {} more: cluster.json has them all</td></tr>",
            list.len() - MAX_ROWS
        );
    }
    s.push_str("</table>");
    if list.len() > FIRST {
        s.push_str("</details>");
    }
    s
}

/// Every problem once, with its hosts and fix (the checks, then the
/// differences between hosts).
fn problems(doc: &Value) -> String {
    let list: Vec<&Value> = items(&doc["problems"])
        .iter()
        .chain(items(&doc["across"]))
        .collect();
    let mut s = String::from("<h2 id=\"problems\">Problems</h2>");
    if list.is_empty() {
        if doc["problems"].is_null() {
            return String::new();
        }
        s.push_str("<p>No check warned or failed on any host.</p>");
        return s;
    }
    s.push_str(
        "<table><tr><th>status</th><th>check</th><th>hosts</th><th>found</th><th>fix</th></tr>",
    );
    for p in list {
        let hosts: Vec<String> = items(&p["hosts"]).iter().map(plain).collect();
        let _ = write!(
            s,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            badge(&plain(&p["status"])),
            esc(&plain(&p["id"])),
            name_list(&hosts),
            esc(&plain(&p["found"])),
            esc(&plain(&p["fix"]))
        );
    }
    s.push_str("</table>");
    s
}

/// One matrix of the pair stage: its rail and devices (none for the
/// matrix of a document without rails) and its Gb/s.
struct Rail<'a> {
    rail: Option<u64>,
    devices: Vec<String>,
    gbps: &'a Value,
}

fn rails(p: &Value) -> Vec<Rail<'_>> {
    match p["rails"].as_array() {
        Some(list) if !list.is_empty() => list
            .iter()
            .enumerate()
            .map(|(k, r)| Rail {
                rail: Some(r["rail"].as_u64().unwrap_or(k as u64)),
                devices: items(&r["devices"]).iter().map(plain).collect(),
                gbps: &r["gbps"],
            })
            .collect(),
        _ => vec![Rail {
            rail: None,
            devices: Vec::new(),
            gbps: &p["gbps"],
        }],
    }
}

/// `gbps[i][j]`, none when absent or not a number.
fn at(m: &Value, i: usize, j: usize) -> Option<f64> {
    m.get(i)?.get(j)?.as_f64()
}

fn median(v: Vec<f64>) -> Option<f64> {
    crate::compare::model::median(v.into_iter().filter(|x| x.is_finite()))
}

/// The file-name label of every rank, as `--out` and `--baseline` spell it
/// (the host reduced to `[A-Za-z0-9._-]`, `-rankN` when ranks share it or
/// their names reduce alike: the `file` each host entry names).
fn file_labels(doc: &Value) -> Vec<String> {
    items(&doc["hosts"])
        .iter()
        .enumerate()
        .map(|(i, h)| {
            // The name the file was written under (made distinct there).
            if let Some(l) = h["file"]
                .as_str()
                .and_then(|f| f.strip_prefix("doctor-")?.strip_suffix(".json"))
            {
                return l.to_owned();
            }
            let host = plain(&h["host"]);
            let safe = super::safe_name(&host);
            let shared = h["label"].as_str().is_some_and(|l| l != host);
            if shared {
                format!("{safe}-rank{}", h["rank"].as_u64().unwrap_or(i as u64))
            } else {
                safe
            }
        })
        .collect()
}

/// The pair stage: a heatmap per rail (or the one matrix), then the failed
/// runs with the command that reruns each.
fn pairs(doc: &Value) -> String {
    let p = &doc["pairs"];
    if !p.is_object() {
        return String::new();
    }
    let names = labels(doc);
    let mut s = format!(
        "<h2 id=\"pairs\">NIC pairs {}</h2><p>erdma-perf <code>{}</code> between every two ranks, \
         both directions; each cell is the client's (row) bandwidth to the server (column) in {}, \
         coloured by its ratio to {}.{} {}</p>",
        badge(&plain(&p["status"])),
        esc(&plain(&p["test"])),
        esc(p["unit"].as_str().unwrap_or("Gb/s")),
        if doc["baseline"].is_object() {
            "the same pair in the baseline (rail 0; other rails: their median)"
        } else {
            "the median of its matrix"
        },
        if p["verified"] == Value::Bool(true) {
            " Every byte received was checked."
        } else {
            ""
        },
        if names.len() > image::IMAGE_ABOVE {
            "Above a few hundred hosts the matrix is an image; cluster.json has every cell's number."
        } else {
            "Hover a cell for its numbers."
        }
    );
    let base = baseline_ratios(doc);
    let mut rails = rails(p);
    if let [r] = rails.as_mut_slice()
        && r.rail.is_none()
    {
        r.devices = option(doc, "--devices")
            .map(|d| d.split(',').map(str::to_owned).collect())
            .unwrap_or_default();
    }
    let unmeasured = not_measured(p);
    if !unmeasured.is_empty() {
        let n = names.len();
        let _ = write!(
            s,
            "<p>{} of {} cells <b>not measured</b>: no round of the schedule planned them (white cells; not a failure).</p>",
            unmeasured.len(),
            n * n.saturating_sub(1)
        );
    }
    let failed = failed_pairs(doc);
    let marks = suspects(doc, &names);
    for r in rails {
        s.push_str(&rail_heatmap(
            &r,
            &names,
            &base,
            &failed,
            &unmeasured,
            &marks,
        ));
    }
    s.push_str(&pair_failures(doc, &names));
    s
}

/// Cells (client, server), sorted: a set that costs 8 bytes a cell (a
/// budgeted job at 10,000 hosts leaves most of 10^8 cells unmeasured).
#[derive(Debug, Default)]
struct CellSet(Vec<(u32, u32)>);

impl CellSet {
    fn contains(&self, c: &(usize, usize)) -> bool {
        match (u32::try_from(c.0), u32::try_from(c.1)) {
            (Ok(a), Ok(b)) => self.0.binary_search(&(a, b)).is_ok(),
            _ => false,
        }
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The cells the schedule left out (`pairs.not_measured`, `[client,
/// server]` each); malformed entries are skipped.
fn not_measured(p: &Value) -> CellSet {
    let mut v: Vec<(u32, u32)> = items(&p["not_measured"])
        .iter()
        .filter_map(|c| {
            Some((
                u32::try_from(c[0].as_u64()?).ok()?,
                u32::try_from(c[1].as_u64()?).ok()?,
            ))
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    CellSet(v)
}

/// Ratio to the baseline for (client, server) of rail 0, by file label.
fn baseline_ratios(doc: &Value) -> std::collections::HashMap<(usize, usize), f64> {
    let labels = file_labels(doc);
    let index = |l: &Value| labels.iter().position(|x| Some(x.as_str()) == l.as_str());
    items(&doc["baseline"]["rows"])
        .iter()
        .filter_map(|r| {
            let key = (index(&r["client"])?, index(&r["server"])?);
            Some((key, r["ratio"].as_f64()?))
        })
        .collect()
}

fn rail_heatmap(
    r: &Rail,
    names: &[String],
    base: &std::collections::HashMap<(usize, usize), f64>,
    failed: &[FailedPair],
    unmeasured: &CellSet,
    marks: &[bool],
) -> String {
    let n = items(r.gbps).len();
    let nccl = r.rail == Some(super::ncclpairs::RAIL as u64);
    let mut title = match r.rail {
        Some(_) if nccl => format!(
            "rail nccl: {} busbw x 8 in Gb/s (each pair's cells alike)",
            super::ncclpairs::TEST
        ),
        Some(k) => format!("rail {k}"),
        None => "the pair matrix".to_owned(),
    };
    if !r.devices.is_empty() && !nccl {
        let mut d = r.devices.clone();
        d.sort();
        d.dedup();
        title.push_str(&format!(" ({})", d.join(", ")));
    }
    let mut s = format!("<h3>{}</h3>", esc(&title));
    if n < 2 {
        s.push_str("<p>One rank: no pair to measure.</p>");
        return s;
    }
    let med = image::median_of(&|sink: &mut dyn FnMut(f64)| {
        for (i, row) in items(r.gbps).iter().enumerate() {
            for (j, g) in items(row).iter().enumerate() {
                if let (true, Some(g)) = (i != j, g.as_f64()) {
                    sink(g);
                }
            }
        }
    });
    let use_base = !base.is_empty() && r.rail.unwrap_or(0) == 0;
    if n > image::IMAGE_ABOVE {
        s.push_str(&rail_image(
            r,
            n,
            names,
            med,
            use_base.then_some(base),
            unmeasured,
            marks,
        ));
        return s;
    }
    let cells: Vec<Vec<Cell>> = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j {
                        return Cell::Diagonal;
                    }
                    let who = format!("{} -> {}", label(names, i), label(names, j));
                    let Some(g) = at(r.gbps, i, j) else {
                        if unmeasured.contains(&(i, j)) {
                            return Cell::NotMeasured {
                                tip: format!("{who}: not measured (no round planned it)"),
                            };
                        }
                        let why = failed
                            .iter()
                            .find(|f| f.client == i && f.server == j && f.rail == r.rail)
                            .map_or("no value".to_owned(), |f| f.errors.join("; "));
                        return Cell::Failed {
                            tip: format!("{who}: failed: {why}"),
                        };
                    };
                    let ratio = if use_base {
                        base.get(&(i, j)).copied()
                    } else {
                        med.filter(|m| *m > 0.0).map(|m| g / m)
                    };
                    let against = if use_base { "baseline" } else { "median" };
                    let tip = match ratio {
                        Some(x) => {
                            format!("{who}: {} Gb/s, {x:.3} of the {against}", svg::gbps_text(g))
                        }
                        None => {
                            format!("{who}: {} Gb/s, no {against} to compare", svg::gbps_text(g))
                        }
                    };
                    Cell::Value {
                        gbps: g,
                        ratio,
                        tip,
                    }
                })
                .collect()
        })
        .collect();
    s.push_str("<div>");
    s.push_str(&svg::heatmap(names, &cells));
    s.push_str("</div>");
    let reference = if use_base {
        "the baseline (same pair)".to_owned()
    } else {
        med.map_or("the median (none)".to_owned(), |m| {
            format!("the median, {} Gb/s", svg::gbps_text(m))
        })
    };
    s.push_str(&svg::legend(&reference));
    if let Some((i, j, g)) = extreme(r.gbps, n) {
        let _ = write!(
            s,
            "<p class=\"meta\">slowest: {} &#8594; {}, {} Gb/s</p>",
            esc(&label(names, i)),
            esc(&label(names, j)),
            svg::gbps_text(g)
        );
    }
    s
}

/// Whether each rank is a suspect: named by a verdict or by the retest's
/// suspects.
fn suspects(doc: &Value, names: &[String]) -> Vec<bool> {
    let index: std::collections::HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .chain(
            items(&doc["hosts"])
                .iter()
                .enumerate()
                .filter_map(|(i, h)| Some((h["host"].as_str()?, i))),
        )
        .collect();
    let mut marked = vec![false; names.len()];
    let mut mark = |i: usize| {
        if let Some(m) = marked.get_mut(i) {
            *m = true;
        }
    };
    // Every host a verdict names, while they are few; else those a host or
    // NIC verdict names and those several verdicts name (one slow host
    // makes a link verdict with each partner: its partners are not marked).
    let list: Vec<&Value> = items(&doc["verdicts"]).iter().collect();
    let named = most_named(&list);
    let few = named.len() <= 20;
    let own: std::collections::HashSet<&str> = list
        .iter()
        .filter(|v| matches!(v["kind"].as_str(), Some("host" | "nic")))
        .flat_map(|v| items(&v["hosts"]).iter().filter_map(Value::as_str))
        .collect();
    for (h, c) in &named {
        let own = own.contains(h.as_str());
        if let (true, Some(&i)) = (few || own || *c > 1, index.get(h.as_str())) {
            mark(i);
        }
    }
    for sp in items(&doc["retest"]["suspects"]) {
        for h in items(&sp["hosts"]).iter().filter_map(Value::as_u64) {
            mark(h as usize);
        }
    }
    marked
}

/// Each rank's send (its row's) and receive (its column's) median Gb/s.
fn host_medians(m: &Value, n: usize) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let mut buf: Vec<f64> = Vec::with_capacity(n);
    let mid = |buf: &mut Vec<f64>| {
        let k = buf.len();
        if k == 0 {
            return None;
        }
        let (left, &mut hi, _) = buf.select_nth_unstable_by(k / 2, f64::total_cmp);
        Some(if k % 2 == 1 {
            hi
        } else {
            (left.iter().copied().fold(f64::NEG_INFINITY, f64::max) + hi) / 2.0
        })
    };
    let mut send = Vec::with_capacity(n);
    for i in 0..n {
        buf.clear();
        buf.extend(
            (0..n)
                .filter(|&j| j != i)
                .filter_map(|j| at(m, i, j))
                .filter(|g| g.is_finite()),
        );
        send.push(mid(&mut buf));
    }
    // The columns a tile at a time: each row is read in runs of TILE
    // cells, not one cell per row per column (a cache miss each: 10 s at
    // 10,000 hosts).
    const TILE: usize = 64;
    let mut recv = Vec::with_capacity(n);
    let mut cols: Vec<Vec<f64>> = (0..TILE).map(|_| Vec::with_capacity(n)).collect();
    for c0 in (0..n).step_by(TILE) {
        let c1 = (c0 + TILE).min(n);
        cols.iter_mut().for_each(Vec::clear);
        for (j, row) in items(m).iter().enumerate().take(n) {
            let row = items(row);
            for i in c0..c1.min(row.len()) {
                match row[i].as_f64() {
                    Some(g) if i != j && g.is_finite() => cols[i - c0].push(g),
                    _ => {}
                }
            }
        }
        for col in cols.iter_mut().take(c1 - c0) {
            recv.push(mid(col));
        }
    }
    (send, recv)
}

/// A large rail's heatmap as an image, with its suspects marked and the
/// hosts' medians beside it, then the hosts with the lowest medians.
fn rail_image(
    r: &Rail,
    n: usize,
    names: &[String],
    med: Option<f64>,
    base: Option<&std::collections::HashMap<(usize, usize), f64>>,
    unmeasured: &CellSet,
    marks: &[bool],
) -> String {
    let reference = med.filter(|m| *m > 0.0);
    let cell = |i: usize, j: usize| {
        if i == j {
            return image::Px::Diagonal;
        }
        match at(r.gbps, i, j) {
            None if unmeasured.contains(&(i, j)) => image::Px::NotMeasured,
            None => image::Px::Failed,
            Some(g) => {
                let ratio = match base {
                    Some(b) => b.get(&(i, j)).copied(),
                    None => reference.map(|m| g / m),
                };
                ratio.map_or(image::Px::NoReference, image::Px::Ratio)
            }
        }
    };
    let (send, recv) = host_medians(r.gbps, n);
    let ratio = |v: &[Option<f64>]| -> Vec<Option<f64>> {
        v.iter().map(|g| Some((*g)? / reference?)).collect()
    };
    let (send_r, recv_r) = (ratio(&send), ratio(&recv));
    let picture = image::Picture {
        n,
        cell: &cell,
        marked: marks,
        send: &send_r,
        recv: &recv_r,
    };
    let mut s = String::from("<div>");
    s.push_str(&image::img(
        &picture,
        "the pair heatmap: rows are clients, columns servers, coloured by the ratio to the reference",
    ));
    s.push_str("</div>");
    let reference_words = if base.is_some() {
        "the baseline (same pair)".to_owned()
    } else {
        med.map_or("the median (none)".to_owned(), |m| {
            format!("the median, {} Gb/s", svg::gbps_text(m))
        })
    };
    s.push_str(&svg::legend(&reference_words));
    let marked: Vec<String> = (0..n)
        .filter(|&i| marks.get(i) == Some(&true))
        .map(|i| format!("{} (row and column {i})", label(names, i)))
        .collect();
    if !marked.is_empty() {
        let _ = write!(s, "<p>Marked: {}</p>", name_list(&marked));
    }
    // The hosts whose send or receive median is lowest.
    let mut low: Vec<(usize, f64)> = (0..n)
        .filter_map(|i| {
            let lo = send[i].into_iter().chain(recv[i]).reduce(f64::min)?;
            Some((i, lo))
        })
        .collect();
    low.sort_by(|a, b| a.1.total_cmp(&b.1));
    if !low.is_empty() {
        s.push_str(
            "<table><tr><th>host (lowest medians)</th><th>send median Gb/s</th>\
             <th>receive median Gb/s</th></tr>",
        );
        let num = |g: Option<f64>| g.map_or("-".to_owned(), svg::gbps_text);
        for (i, _) in low.iter().take(10) {
            let _ = write!(
                s,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(&label(names, *i)),
                num(send[*i]),
                num(recv[*i])
            );
        }
        s.push_str("</table>");
    }
    if let Some((i, j, g)) = extreme(r.gbps, n) {
        let _ = write!(
            s,
            "<p class=\"meta\">slowest: {} &#8594; {}, {} Gb/s; every cell's number is in cluster.json</p>",
            esc(&label(names, i)),
            esc(&label(names, j)),
            svg::gbps_text(g)
        );
    }
    s
}

/// The slowest measured direction.
fn extreme(m: &Value, n: usize) -> Option<(usize, usize, f64)> {
    (0..n)
        .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
        .filter_map(|(i, j)| at(m, i, j).map(|g| (i, j, g)))
        .min_by(|a, b| a.2.total_cmp(&b.2))
}

/// One failed direction of one pair (on one rail).
struct FailedPair {
    rail: Option<u64>,
    client: usize,
    server: usize,
    errors: Vec<String>,
    rerun: String,
}

/// Every direction that failed: runs with an error, grouped by (rail,
/// client, server), with their rerun command (the run's own, else built).
fn failed_pairs(doc: &Value) -> Vec<FailedPair> {
    let p = &doc["pairs"];
    let mut out: Vec<FailedPair> = Vec::new();
    for run in items(&p["runs"]) {
        let (Some(c), Some(sv)) = (run["client"].as_u64(), run["server"].as_u64()) else {
            continue;
        };
        let (c, sv) = (c as usize, sv as usize);
        let rail = run["rail"].as_u64();
        let mut error = plain(&run["error"]);
        if run["corrupt"] == Value::Bool(true) && error.is_empty() {
            error = "the payload arrived corrupted".into();
        }
        if error.is_empty() {
            continue;
        }
        let error = format!("{} side: {error}", plain(&run["role"]));
        match out
            .iter_mut()
            .find(|f| f.rail == rail && f.client == c && f.server == sv)
        {
            Some(f) => {
                f.errors.push(error);
                if let Some(r) = text(&run["rerun"]) {
                    f.rerun = r.to_owned();
                }
            }
            None => out.push(FailedPair {
                rail,
                client: c,
                server: sv,
                errors: vec![error],
                rerun: text(&run["rerun"])
                    .map_or_else(|| pair_rerun(doc, run, c, sv), str::to_owned),
            }),
        }
    }
    out
}

/// The value of `--name` on the document's command line (`--name V` or
/// `--name=V`).
fn option(doc: &Value, name: &str) -> Option<String> {
    let words: Vec<String> = items(&doc["command"]).iter().map(plain).collect();
    let eq = format!("{name}=");
    words.iter().enumerate().find_map(|(k, w)| {
        if w == name {
            words.get(k + 1).cloned()
        } else {
            w.strip_prefix(&eq).map(str::to_owned)
        }
    })
}

/// A command that measures only this pair again: two ranks on the two
/// hosts, the same test, devices and erdma-perf options.
fn pair_rerun(doc: &Value, run: &Value, c: usize, sv: usize) -> String {
    let host = |i: usize| plain(&doc["hosts"][i]["host"]);
    let (hc, hs) = (host(c), host(sv));
    let hosts = if hc == hs {
        format!("{}:2", sh(&hc))
    } else {
        format!("{},{}", sh(&hc), sh(&hs))
    };
    let listed: Vec<String> = option(doc, "--devices")
        .map(|d| d.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let rail_devs = items(&doc["pairs"]["rails"])
        .iter()
        .find(|r| r["rail"] == run["rail"])
        .map(|r| (plain(&r["devices"][c]), plain(&r["devices"][sv])));
    let pick = |key: &str, i: usize, from_rail: Option<String>| {
        run[key]
            .as_str()
            .map(str::to_owned)
            .or(from_rail.filter(|d| !d.is_empty()))
            .or_else(|| (!listed.is_empty()).then(|| listed[i % listed.len()].clone()))
    };
    let dc = pick("client_device", c, rail_devs.as_ref().map(|d| d.0.clone()));
    let ds = pick("server_device", sv, rail_devs.map(|d| d.1));
    let mut cmd = format!("mpirun -np 2 -H {hosts} erdma-cluster --pairs");
    if let Some(t) = doc["pairs"]["test"].as_str() {
        let _ = write!(cmd, " --pair-test {}", sh(t));
    }
    if let (Some(a), Some(b)) = (dc, ds) {
        let _ = write!(cmd, " --devices {}", sh(&format!("{a},{b}")));
    }
    for opt in ["--perf-args", "--skip"] {
        if let Some(v) = option(doc, opt) {
            let _ = write!(cmd, " {opt} {}", sh(&v));
        }
    }
    cmd
}

fn pair_failures(doc: &Value, names: &[String]) -> String {
    let failed = failed_pairs(doc);
    if failed.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "<h3>Failed pair directions</h3><table><tr><th>rail</th><th>client &#8594; server</th>\
         <th>what failed</th><th>rerun only this pair</th></tr>",
    );
    let total = failed.len();
    for f in failed.into_iter().take(MAX_ROWS) {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{} &#8594; {}</td><td>{}</td><td><pre>{}</pre></td></tr>",
            f.rail.map_or("-".to_owned(), |r| r.to_string()),
            esc(&label(names, f.client)),
            esc(&label(names, f.server)),
            esc(&f.errors.join("; ")),
            esc(&f.rerun)
        );
    }
    if total > MAX_ROWS {
        let _ = write!(
            s,
            "<tr><td colspan=\"4\">and {} more failed directions: cluster.json has them all (<code>pairs.runs</code>)</td></tr>",
            total - MAX_ROWS
        );
    }
    s.push_str("</table>");
    s
}

/// The rows a long table shows: all of them up to [`MAX_ROWS`]; beyond, the
/// rows whose `key` is not "ok" first, up to [`MAX_ROWS`]. Also the line
/// (HTML) that says what was left out, if anything.
fn shown_rows<'a>(rows: &'a [Value], key: &str, cols: usize) -> (Vec<&'a Value>, String) {
    if rows.len() <= MAX_ROWS {
        return (rows.iter().collect(), String::new());
    }
    let mut list: Vec<&Value> = rows.iter().collect();
    list.sort_by_key(|r| r[key] == "ok");
    list.truncate(MAX_ROWS);
    let mut by: Vec<(String, usize)> = Vec::new();
    for r in rows {
        let k = plain(&r[key]);
        match by.iter_mut().find(|(x, _)| *x == k) {
            Some(e) => e.1 += 1,
            None => by.push((k, 1)),
        }
    }
    let counts: Vec<String> = by.iter().map(|(k, c)| format!("{c} {}", esc(k))).collect();
    let note = format!(
        "<tr><td colspan=\"{cols}\">{} rows ({}): the first {MAX_ROWS} shown, those not ok first; cluster.json has them all</td></tr>",
        rows.len(),
        counts.join(", ")
    );
    (list, note)
}

/// The pair matrix against the baseline, row by row.
/// The latency matrix (`--latency`): median and p99 per cell, up to 32
/// ranks as a table (the JSON has all), and its verdicts.
fn latency(doc: &Value) -> String {
    let l = &doc["latency"];
    if !l.is_object() {
        return String::new();
    }
    let names = labels(doc);
    let m = items(&l["median_us"]);
    let n = m.len();
    let mut s = format!(
        "<h2 id=\"latency\">Latency {}</h2><p>erdma-perf {} between the pairs the schedule met: \
         median (p99) in &#181;s, row: client, column: server.</p>",
        badge(&plain(&l["status"])),
        esc(&plain(&l["test"]))
    );
    for v in items(&l["verdicts"]) {
        let _ = write!(
            s,
            "<p>{} <b>{}</b> {}</p>",
            badge(&plain(&v["status"])),
            esc(&plain(&v["kind"])),
            esc(&plain(&v["why"]))
        );
    }
    for e in items(&l["errors"]) {
        let _ = write!(
            s,
            "<p>{} {} run side(s): {}</p>",
            badge("fail"),
            items(&e["runs"]).len(),
            esc(&plain(&e["error"]))
        );
    }
    if n > 32 {
        s.push_str("<p>More than 32 ranks: the cells are in cluster.json (latency.median_us, latency.p99_us).</p>");
        return s;
    }
    s.push_str("<table><tr><th>client \\ server</th>");
    for j in 0..n {
        let _ = write!(s, "<th>{}</th>", esc(&label(&names, j)));
    }
    s.push_str("</tr>");
    for i in 0..n {
        let _ = write!(s, "<tr><th>{}</th>", esc(&label(&names, i)));
        for j in 0..n {
            let cell = match (at(&l["median_us"], i, j), at(&l["p99_us"], i, j)) {
                _ if i == j => "-".to_owned(),
                (Some(m), Some(p)) => format!("{} ({})", svg::trim_num(m), svg::trim_num(p)),
                (Some(m), None) => svg::trim_num(m),
                (None, _) => "&#8212;".to_owned(),
            };
            let _ = write!(s, "<td class=\"num\">{cell}</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    s
}

fn baseline(doc: &Value) -> String {
    let b = &doc["baseline"];
    if !b.is_object() {
        return String::new();
    }
    let mut s = format!(
        "<h2 id=\"baseline\">Against the baseline {}</h2><p>{} (a pair under {} of its baseline fails)</p>\
         <table><tr><th>status</th><th>client &#8594; server</th><th>Gb/s</th><th>baseline Gb/s</th>\
         <th>ratio</th><th>note</th></tr>",
        badge(&plain(&b["status"])),
        esc(&plain(&b["dir"])),
        esc(&plain(&b["fail_below"]))
    );
    let num = |v: &Value| v.as_f64().map_or("-".to_owned(), svg::trim_num);
    let (rows, left_out) = shown_rows(items(&b["rows"]), "status", 6);
    for r in rows {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{} &#8594; {}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td>{}</td></tr>",
            badge(&plain(&r["status"])),
            esc(&plain(&r["client"])),
            esc(&plain(&r["server"])),
            num(&r["gbps"]),
            num(&r["baseline_gbps"]),
            r["ratio"]
                .as_f64()
                .map_or("-".to_owned(), |x| format!("{x:.3}")),
            esc(&plain(&r["note"]))
        );
    }
    s.push_str(&left_out);
    s.push_str("</table>");
    s
}

/// (size, busbw) of a stage's rows that have both.
fn curve(rows: &Value) -> Vec<(f64, f64)> {
    items(rows)
        .iter()
        .filter_map(|r| Some((r["size"].as_f64()?, r["busbw"].as_f64()?)))
        .collect()
}

/// The NCCL stage: busbw against size for every stage (with the
/// baseline's curves) and a table of the stages.
fn nccl(doc: &Value) -> String {
    let n = &doc["nccl"];
    if !n.is_object() {
        return String::new();
    }
    let stages = items(&n["stages"]);
    let mut s = format!(
        "<h2 id=\"nccl\">NCCL {}</h2><p>backend <b>{}</b>{}{}</p>",
        badge(&plain(&n["status"])),
        esc(&plain(&n["backend"])),
        // Only NCCL drives GPUs: on the MPI/host backend the count means nothing.
        n["gpus_per_rank"]
            .as_u64()
            .filter(|_| n["backend"] == "nccl")
            .map_or(String::new(), |g| format!(", {g} GPU(s) per rank")),
        match n["why"].as_str() {
            Some(w) if !w.is_empty() => format!(": {}", esc(w)),
            _ => String::new(),
        }
    );
    if let Some(why) = n["skipped"].as_str() {
        let _ = write!(s, "<p>{} {}</p>", badge("warn"), esc(why));
    }
    let mut series = Vec::new();
    let mut expected = Vec::new();
    let mut legend = String::new();
    // A curve per stage while they are few; else the stages across hosts
    // and the slowest per-host ones (at their largest size).
    let charted: Vec<&Value> = if stages.len() <= 12 {
        stages.iter().collect()
    } else {
        let last = |st: &Value| curve(&st["rows"]).last().map_or(f64::NEG_INFINITY, |p| p.1);
        let mut host: Vec<&Value> = stages.iter().filter(|st| st["scope"] == "host").collect();
        host.sort_by(|a, b| last(a).total_cmp(&last(b)));
        let mut c: Vec<&Value> = stages
            .iter()
            .filter(|st| st["scope"] != "host")
            .take(6)
            .collect();
        c.extend(host.into_iter().take(12 - c.len()));
        let _ = write!(
            s,
            "<p class=\"meta\">{} stages: the chart shows the stages across hosts and the slowest per-host ones, {} curves.</p>",
            stages.len(),
            c.len()
        );
        c
    };
    for (k, st) in charted.into_iter().enumerate() {
        let colour = svg::PALETTE[k % svg::PALETTE.len()];
        let name = plain(&st["name"]);
        let _ = write!(
            legend,
            "<span class=\"swatch\" style=\"background:{colour}\"></span>{}",
            esc(&name)
        );
        series.push(Series {
            name: name.clone(),
            colour,
            points: curve(&st["rows"]),
            baseline: false,
        });
        if st["baseline_rows"].is_array() {
            series.push(Series {
                name: format!("{name} (baseline)"),
                colour,
                points: curve(&st["baseline_rows"]),
                baseline: true,
            });
            let _ = write!(
                legend,
                "<span class=\"swatch dash\" style=\"border-color:{colour}\"></span>{} (baseline)",
                esc(&name)
            );
        }
        if let Some(e) = st["expected_busbw"].as_f64() {
            expected.push((e, colour));
        }
    }
    if !stages.is_empty() {
        s.push_str(&svg::busbw_chart(&series, &expected));
        let _ = write!(
            s,
            "<p>{legend}{}</p>",
            if expected.is_empty() {
                ""
            } else {
                "<span class=\"swatch\" style=\"border-top:2px dotted #555;height:0\"></span>expected busbw (dotted)"
            }
        );
    }
    s.push_str(&stage_table(doc, stages));
    s
}

fn stage_table(doc: &Value, stages: &[Value]) -> String {
    if stages.is_empty() {
        return "<p>No stage ran.</p>".into();
    }
    let mut s = String::from(
        "<table><tr><th>stage</th><th>status</th><th>hosts</th><th>collective</th>\
         <th>busbw at the largest size</th><th>expected</th><th>baseline</th><th>wrong</th>\
         <th>JSON</th><th>error / rerun</th></tr>",
    );
    // Many ok per-host stages are one row (names on demand).
    let many = stages.len() > 12;
    let folded: Vec<String> = if many {
        stages
            .iter()
            .filter(|st| st["scope"] == "host" && st["status"] == "ok" && st["error"].is_null())
            .map(|st| plain(&st["name"]))
            .collect()
    } else {
        Vec::new()
    };
    if !folded.is_empty() {
        let _ = write!(
            s,
            "<tr><td>{} per-host stages</td><td>{}</td><td colspan=\"8\">{}</td></tr>",
            folded.len(),
            badge("ok"),
            name_list(&folded)
        );
    }
    let listed: Vec<&Value> = stages
        .iter()
        .filter(|st| {
            !(many && st["scope"] == "host" && st["status"] == "ok" && st["error"].is_null())
        })
        .collect();
    let total = listed.len();
    for st in listed.into_iter().take(MAX_ROWS) {
        let last = |key: &str| {
            items(&st[key])
                .iter()
                .rev()
                .find_map(|r| Some((r["size"].as_f64()?, r["busbw"].as_f64()?)))
        };
        let at_size = |v: Option<(f64, f64)>| {
            v.map_or("-".to_owned(), |(size, bw)| {
                format!("{} GB/s at {}", svg::trim_num(bw), svg::size_label(size))
            })
        };
        let wrong: u64 = items(&st["rows"])
            .iter()
            .filter_map(|r| r["wrong"].as_u64())
            .sum();
        let hosts: Vec<String> = items(&st["hosts"]).iter().map(plain).collect();
        let expected = match st["expected_busbw"].as_f64() {
            Some(e) => format!(
                "{} GB/s: {}",
                svg::trim_num(e),
                esc(&plain(&st["expected_why"]))
            ),
            None => esc(&plain(&st["expected_why"])),
        };
        let json = match st["json"].as_str() {
            Some(f) if !f.contains("://") => {
                format!("<a href=\"{}\">{}</a>", esc(f), esc(f))
            }
            _ => String::new(),
        };
        let failed = st["status"] == "fail" || !st["error"].is_null();
        let mut fix = esc(&plain(&st["error"]));
        if failed {
            let rerun = text(&st["rerun"]).map_or_else(|| stage_rerun(doc, st), str::to_owned);
            let _ = write!(fix, "<pre>{}</pre>", esc(&rerun));
        }
        let _ = write!(
            s,
            "<tr><td>{} <span class=\"muted\">({})</span></td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td>{}</td><td>{}</td></tr>",
            esc(&plain(&st["name"])),
            esc(&plain(&st["scope"])),
            badge(&plain(&st["status"])),
            esc(&hosts.join(", ")),
            esc(&plain(&st["collective"])),
            at_size(last("rows")),
            expected,
            at_size(last("baseline_rows"))
                + if st["below_baseline"] == Value::Bool(true) {
                    " (below)"
                } else {
                    ""
                },
            wrong,
            json,
            fix
        );
    }
    if total > MAX_ROWS {
        let _ = write!(
            s,
            "<tr><td colspan=\"10\">and {} more stages: cluster.json has them all</td></tr>",
            total - MAX_ROWS
        );
    }
    s.push_str("</table>");
    s
}

/// A command that runs only this stage's collective again on its hosts:
/// the nccl-tests work-alike with the stage's sizes and data checked.
fn stage_rerun(doc: &Value, st: &Value) -> String {
    let hosts: Vec<String> = items(&st["hosts"]).iter().map(plain).collect();
    let collective = st["collective"].as_str().unwrap_or("all_reduce");
    let sizes: Vec<f64> = curve(&st["rows"]).iter().map(|p| p.0).collect();
    let size = |f: fn(f64, f64) -> f64, dflt: f64| sizes.iter().copied().reduce(f).unwrap_or(dflt);
    let mut cmd = format!(
        "mpirun -np {} -H {} {}_perf -b {} -e {} -f 2 -c 1",
        hosts.len().max(1),
        sh(&hosts.join(",")),
        sh(collective),
        size(f64::min, 8.0),
        size(f64::max, 1073741824.0)
    );
    match doc["nccl"]["backend"].as_str() {
        Some(b) if b != "nccl" => {
            let _ = write!(cmd, " --backend {}", sh(b));
        }
        _ => {}
    }
    cmd
}

/// A direction's bytes, else its packets (rxe counts packets only), else
/// "not counted".
fn counted(row: &Value, dir: &str) -> String {
    let b = &row[format!("{dir}_bytes")];
    match row[format!("{dir}_packets")].as_u64() {
        Some(p) if b.is_null() => format!("{p} packets"),
        _ => bytes(b),
    }
}

/// The traffic proof: per host, NIC and stage, the bytes the NIC moved
/// against what the collective had to send.
fn traffic(doc: &Value) -> String {
    let t = &doc["traffic"];
    if !t.is_object() {
        return String::new();
    }
    let mut s = format!(
        "<h2 id=\"traffic\">Traffic proof {}</h2><p>What each NIC's counters moved during each \
         stage, against the bytes the collective had to send between the hosts (the guide's \
         <code>eadm stat</code> step).</p><table><tr><th>verdict</th><th>host</th><th>NIC</th>\
         <th>stage</th><th>tx</th><th>rx</th><th>expected</th><th>error counters</th><th>why</th></tr>",
        badge(&plain(&t["status"]))
    );
    let (rows, left_out) = shown_rows(items(&t["rows"]), "verdict", 9);
    for r in rows {
        let errors: Vec<String> = r["errors"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k} +{}", plain(v)))
            .collect();
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            badge(&plain(&r["verdict"])),
            esc(&plain(&r["host"])),
            esc(&plain(&r["nic"])),
            esc(&plain(&r["stage"])),
            counted(r, "tx"),
            counted(r, "rx"),
            if r["expected_bytes"].is_null() {
                "-".to_owned()
            } else {
                bytes(&r["expected_bytes"])
            },
            if errors.is_empty() {
                "none moved".to_owned()
            } else {
                esc(&errors.join(", "))
            },
            esc(&plain(&r["why"]))
        );
    }
    s.push_str(&left_out);
    if items(&t["rows"]).is_empty() {
        s.push_str("<tr><td colspan=\"9\">no counters were read</td></tr>");
    }
    s.push_str("</table>");
    s
}
