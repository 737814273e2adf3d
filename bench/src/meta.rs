//! The header every tool's `--json` document starts with (`tool`, `version`,
//! `host`, `date`, `command`), so that documents gathered from many hosts can be
//! concatenated and told apart.

use std::time::{SystemTime, UNIX_EPOCH};

/// Who ran what, where and when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunMeta {
    /// The tool's binary name, e.g. `erdma-doctor`.
    pub tool: String,
    /// The crate version.
    pub version: String,
    /// This host's name (`gethostname`).
    pub host: String,
    /// When the tool started, RFC 3339 in UTC (`2026-12-03T12:34:56Z`).
    pub date: String,
    /// The command line (argv).
    pub command: Vec<String>,
}

impl RunMeta {
    /// The header of `tool` for this process, now.
    pub fn now(tool: &str) -> RunMeta {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        RunMeta {
            tool: tool.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            host: hostname(),
            date: rfc3339_utc(secs),
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

/// This host's name; `unknown` when `gethostname` fails.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its whole length; gethostname NUL-terminates
    // on success when the name fits (we keep one byte spare).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Seconds since the Unix epoch as RFC 3339 UTC, e.g. `1970-01-01T00:00:00Z`.
pub fn rfc3339_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        // `date -u -d @951782400` (a leap day) and `@1798374896`.
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_798_374_896), "2026-12-27T12:34:56Z");
        assert_eq!(rfc3339_utc(4_102_444_799), "2099-12-31T23:59:59Z");
    }

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
