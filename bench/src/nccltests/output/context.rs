//! The run's context, written into our JSON and CSV so that a comparison of
//! two result files explains itself (`erdma-compare` shows what differs):
//! the tool and its version, the date, the NCCL library, the GPUs, the
//! hosts and the `NCCL_*` environment. The command line is already in both
//! (JSON `args`, CSV `command` column).
//!
//! JSON: one extra top-level object under the key [`JSON_KEY`], before
//! `config`; nccl-tests' own keys keep their schema, so its tools still
//! read the file. CSV: extra columns after nccl-tests-like ones
//! ([`CSV_COLUMNS`]), the same value on every row, so the file stays a
//! plain table and files concatenated from many runs keep their context
//! per row. Lists in a CSV cell are separated by `;` (models, hosts), and
//! the command and environment are shell words (see [`shell_join`]).

use super::json::JsonWriter;
use super::text::DeviceLine;
use std::io::Write;

/// The top-level JSON key holding our context.
pub const JSON_KEY: &str = "erdma";

/// The CSV columns holding the context, after the result columns.
pub const CSV_COLUMNS: [&str; 7] = [
    "nccl_version",
    "gpus",
    "gpu_model",
    "hosts",
    "nccl_env",
    "date",
    "command",
];

/// What a result file records about the run that produced it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunContext {
    /// The benchmark binary (`all_reduce_perf`).
    pub program: String,
    /// `nccl`, `mpi` or `host`.
    pub backend: String,
    /// The erdma-bench version.
    pub version: String,
    /// Start of the run, RFC 3339 UTC.
    pub date: String,
    /// The command line.
    pub command: Vec<String>,
    /// The loaded NCCL library (`2.28.9`); None with the host/MPI backends.
    pub nccl_version: Option<String>,
    /// Devices (ranks) of the whole run.
    pub gpus: usize,
    /// Distinct device names, in rank order.
    pub gpu_models: Vec<String>,
    /// Distinct host names, in rank order.
    pub hosts: Vec<String>,
    /// `NCCL_*` variables of the printing process, sorted.
    pub nccl_env: Vec<(String, String)>,
}

impl RunContext {
    /// The context of this run: `library` is `ncclGetVersion()` (0 without
    /// NCCL), `procs` every process's device lines.
    pub fn collect(
        program: &str,
        backend: &str,
        argv: &[String],
        library: i32,
        procs: &[Vec<DeviceLine>],
    ) -> RunContext {
        let lines: Vec<&DeviceLine> = procs.iter().flatten().collect();
        let mut nccl_env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| {
                let k = k.to_string_lossy().into_owned();
                k.starts_with("NCCL_")
                    .then(|| (k, v.to_string_lossy().into_owned()))
            })
            .collect();
        nccl_env.sort();
        RunContext {
            program: program.into(),
            backend: backend.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            date: crate::nccltests::cfmt::rfc3339_utc_now(),
            command: argv.to_vec(),
            nccl_version: erdma::nccl::Version::from_code(library)
                .filter(|_| library > 0)
                .map(|v| v.to_string()),
            gpus: lines.len(),
            gpu_models: distinct(lines.iter().map(|d| d.name.as_str())),
            hosts: distinct(lines.iter().map(|d| d.hostname.as_str())),
            nccl_env,
        }
    }

    /// Writes `"erdma": {...}` at the current (top) level of `w`.
    pub fn write_json<W: Write>(&self, w: &mut JsonWriter<W>) {
        w.key(JSON_KEY);
        w.start_object();
        for (k, v) in [
            ("tool", "erdma-bench"),
            ("version", &self.version),
            ("program", &self.program),
            ("backend", &self.backend),
            ("date", &self.date),
        ] {
            w.key(k);
            w.string(v);
        }
        w.key("nccl_version");
        match &self.nccl_version {
            Some(v) => w.string(v),
            None => w.null(),
        }
        w.key("gpus");
        w.uint(self.gpus as u64);
        w.key("gpu_models");
        string_list(w, &self.gpu_models);
        w.key("hosts");
        string_list(w, &self.hosts);
        w.key("nccl_env");
        w.start_object();
        for (k, v) in &self.nccl_env {
            w.key(k);
            w.string(v);
        }
        w.finish_object();
        w.finish_object();
    }

    /// The values of [`CSV_COLUMNS`].
    pub fn csv_values(&self) -> Vec<String> {
        let env: Vec<String> = self
            .nccl_env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        vec![
            self.nccl_version.clone().unwrap_or_default(),
            self.gpus.to_string(),
            self.gpu_models.join(";"),
            self.hosts.join(";"),
            shell_join(&env),
            self.date.clone(),
            shell_join(&self.command),
        ]
    }
}

fn string_list<W: Write>(w: &mut JsonWriter<W>, items: &[String]) {
    w.start_list();
    items.iter().for_each(|s| w.string(s));
    w.finish_list();
}

fn distinct<'a>(items: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in items {
        if !out.iter().any(|o| o == s) {
            out.push(s.to_string());
        }
    }
    out
}

/// Joins words as a POSIX shell would read them back: words with anything
/// but `[A-Za-z0-9_@%+=:,./-]` are single-quoted (`'` as `'\''`).
pub fn shell_join(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            let plain = !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b));
            if plain {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits what [`shell_join`] wrote (and simple shell text: single and
/// double quotes, backslash escapes) back into words.
pub fn shell_split(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    cur.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => cur.extend(chars.next()),
                        _ => cur.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(rank: i32, host: &str, name: &str) -> DeviceLine {
        DeviceLine {
            rank,
            group: 0,
            pid: 1,
            hostname: host.into(),
            device: rank % 8,
            pci: (0, 0, 0),
            name: name.into(),
        }
    }

    #[test]
    fn shell_words_round_trip() {
        let words: Vec<String> = ["all_reduce_perf", "-b", "8", "", "a b", "it's", "x=\"y\""]
            .map(String::from)
            .to_vec();
        let joined = shell_join(&words);
        assert_eq!(joined, r#"all_reduce_perf -b 8 '' 'a b' 'it'\''s' 'x="y"'"#);
        assert_eq!(shell_split(&joined), words);
        assert_eq!(shell_split(r#" a "b c" d\ e "#), ["a", "b c", "d e"]);
    }

    #[test]
    fn context_counts_devices_hosts_and_models() {
        let procs = vec![
            vec![
                line(0, "node1", "NVIDIA H200"),
                line(1, "node1", "NVIDIA H200"),
            ],
            vec![
                line(2, "node2", "NVIDIA H200"),
                line(3, "node2", "NVIDIA H100"),
            ],
        ];
        let argv = vec!["all_reduce_perf".to_string(), "-g".into(), "2".into()];
        let c = RunContext::collect("all_reduce_perf", "nccl", &argv, 22809, &procs);
        assert_eq!(c.gpus, 4);
        assert_eq!(c.hosts, ["node1", "node2"]);
        assert_eq!(c.gpu_models, ["NVIDIA H200", "NVIDIA H100"]);
        assert_eq!(c.nccl_version.as_deref(), Some("2.28.9"));
        assert!(c.nccl_env.iter().all(|(k, _)| k.starts_with("NCCL_")));
        let none = RunContext::collect("all_reduce_perf", "mpi", &argv, 0, &procs);
        assert_eq!(none.nccl_version, None);

        let mut w = JsonWriter::new(Vec::new());
        w.start_object();
        RunContext {
            nccl_env: vec![("NCCL_IB_HCA".into(), "erdma_0".into())],
            ..c.clone()
        }
        .write_json(&mut w);
        w.finish_all();
        let v: serde_json::Value = serde_json::from_slice(&w.into_inner()).unwrap();
        let e = &v[JSON_KEY];
        assert_eq!(e["tool"], "erdma-bench");
        assert_eq!(e["gpus"], 4);
        assert_eq!(e["hosts"][1], "node2");
        assert_eq!(e["nccl_env"]["NCCL_IB_HCA"], "erdma_0");
        assert_eq!(e["nccl_version"], "2.28.9");

        let vals = c.csv_values();
        assert_eq!(vals.len(), CSV_COLUMNS.len());
        assert_eq!(vals[1], "4");
        assert_eq!(vals[3], "node1;node2");
        assert_eq!(vals[6], "all_reduce_perf -g 2");
    }
}
