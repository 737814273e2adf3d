//! The header every tool's `--json` document starts with (`tool`, `version`,
//! `host`, `date`, `command`), so that documents gathered from many hosts can be
//! concatenated and told apart.

/// Who ran what, where and when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunMeta {
    /// The tool's binary name, e.g. `erdma-doctor`.
    pub tool: String,
    /// The crate version.
    pub version: String,
    /// This host's short name (as nccl-tests and erdma-compare print it).
    pub host: String,
    /// When the tool started, RFC 3339 in UTC (`2026-12-03T12:34:56Z`).
    pub date: String,
    /// The command line (argv).
    pub command: Vec<String>,
}

impl RunMeta {
    /// The header of `tool` for this process, now.
    pub fn now(tool: &str) -> RunMeta {
        RunMeta {
            tool: tool.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            host: crate::nccltests::bootstrap::hosthash::short_hostname(),
            date: crate::nccltests::cfmt::rfc3339_utc_now(),
            command: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        }
    }

    /// The header as a JSON object, to which a tool adds its results.
    pub fn to_json(&self) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_has_every_field() {
        let m = RunMeta::now("erdma-test");
        let j = m.to_json();
        for k in ["tool", "version", "host", "date", "command"] {
            assert!(j.contains_key(k), "{k} missing in {j:?}");
        }
        assert_eq!(j["tool"], "erdma-test");
        assert!(m.date.ends_with('Z') && m.date.len() == 20, "{}", m.date);
        assert!(!m.host.is_empty());
    }
}
