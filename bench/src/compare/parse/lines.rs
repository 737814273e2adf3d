//! Physical lines of a job's output, cleaned of what a launcher and NCCL
//! put in them: mpirun's `--tag-output` (`[1,0]<stdout>:`) and srun's
//! `--label` (`0: `) prefixes, and `NCCL INFO`/`WARN`/`TRACE` messages,
//! which NCCL may write in the middle of a table row (the row is printed in
//! pieces, and a lazily connected channel logs between them).

/// One physical line, split.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split<'a> {
    /// The line's own text, without prefixes and without the NCCL message
    /// (what was printed before NCCL's line began; often empty).
    pub text: String,
    /// The NCCL message from `NCCL INFO`/`WARN`/`TRACE` on, if any.
    pub nccl: Option<&'a str>,
}

/// Removes launcher prefixes: `[1,0]<stdout>:`, `[1,0]<stderr>:` (mpirun
/// `--tag-output`) and `0: ` (srun `--label`).
pub fn strip_launcher_prefix(line: &str) -> &str {
    let mut s = line;
    if s.starts_with('[')
        && let Some(end) = s.find(">:")
        && end < 40
        && (s[..end].ends_with("<stdout") || s[..end].ends_with("<stderr"))
    {
        s = &s[end + 2..];
    }
    let t = s.trim_start();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && t[digits..].starts_with(": ") {
        s = &t[digits + 2..];
    }
    s
}

const MARKERS: [&str; 3] = [" NCCL INFO ", " NCCL WARN ", " NCCL TRACE "];

/// Splits a line into its own text and an NCCL message. NCCL's prefix is
/// `[time] host:pid:tid [dev] ` (the time only for some levels since NCCL
/// 2.26); text printed just before it, without a newline, is kept.
pub fn split_nccl(line: &str) -> Split<'_> {
    let line = strip_launcher_prefix(line);
    let found = MARKERS
        .iter()
        .filter_map(|m| line.find(m))
        .min()
        .or_else(|| {
            line.starts_with("NCCL ")
                .then_some(0)
                .filter(|_| is_bare(line))
        });
    let Some(at) = found else {
        return Split {
            text: line.to_string(),
            nccl: None,
        };
    };
    let msg = line[at..].trim_start();
    let before = &line[..at];
    let text = own_text(before).unwrap_or_default();
    Split {
        text,
        nccl: Some(msg),
    }
}

/// `NCCL version ...` or `NCCL INFO ...` printed without a prefix.
fn is_bare(line: &str) -> bool {
    ["NCCL version ", "NCCL INFO ", "NCCL WARN "]
        .iter()
        .any(|p| line.starts_with(p))
}

/// What came before NCCL's `host:pid:tid [dev]` prefix in `before` (the
/// text up to the marker), or None when the prefix is not recognised.
fn own_text(before: &str) -> Option<String> {
    let toks = tokens(before);
    // The `[dev]` token right after `host:pid:tid` (TRACE puts more after it).
    let j = (1..toks.len()).rev().find(|&j| {
        let t = toks[j].1;
        t.len() > 2
            && t.starts_with('[')
            && t.ends_with(']')
            && t[1..t.len() - 1].bytes().all(|b| b.is_ascii_digit())
            && host_pid_tid_start(toks[j - 1].1, j == 1).is_some()
    })?;
    let (off, host_tok) = toks[j - 1];
    let mut head = &before[..off];
    let glued = host_pid_tid_start(host_tok, head.trim().is_empty())?;
    let mut frag = host_tok[..glued].to_string();
    // `[2025-01-01 12:00:00] ` timestamp before the host (NCCL >= 2.26).
    if frag.is_empty() && head.trim_end().ends_with(']') {
        let h = head.trim_end();
        if let Some(lb) = h.rfind('[') {
            let inside = &h[lb + 1..h.len() - 1];
            if inside.contains(':') {
                head = &h[..lb];
            }
        }
    }
    frag.insert_str(0, head);
    Some(frag)
}

/// Where `host:pid:tid` starts in a token that may have text glued before
/// it (`-1node1:123:123`): the shortest numeric (or `N/A`) head that leaves
/// a valid host name, or 0 when the whole token is `host:pid:tid`. The
/// first token of a line is taken whole when it can be (a host named
/// `10-0-0-1` is not `1` glued to `0-0-0-1`): row pieces start with spaces.
fn host_pid_tid_start(tok: &str, first: bool) -> Option<usize> {
    let mut parts = tok.rsplitn(3, ':');
    let (tid, pid, host) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(tid) || !digits(pid) || host.is_empty() {
        return None;
    }
    let host_ok = |h: &str| {
        h.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    };
    if first && host_ok(host) {
        return Some(0);
    }
    (1..host.len())
        .filter(|&s| host.is_char_boundary(s))
        .find(|&s| {
            let head = &host[..s];
            (head == "N/A" || head.parse::<f64>().is_ok()) && host_ok(&host[s..])
        })
        .or_else(|| host_ok(host).then_some(0))
}

/// Whitespace-separated tokens with their byte offsets.
fn tokens(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(st)) => {
                out.push((st, &s[st..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(st) = start {
        out.push((st, &s[st..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_prefixes() {
        assert_eq!(
            strip_launcher_prefix("[1,0]<stdout>:#  Rank 0"),
            "#  Rank 0"
        );
        assert_eq!(strip_launcher_prefix("[1,12]<stderr>:x"), "x");
        assert_eq!(strip_launcher_prefix("  3: # nThread 1"), "# nThread 1");
        assert_eq!(
            strip_launcher_prefix("           8             2     float"),
            "           8             2     float"
        );
    }

    #[test]
    fn whole_nccl_lines() {
        let s = split_nccl("node1:2345:2345 [0] NCCL INFO NCCL version 2.19.3+cuda12.3");
        assert_eq!(s.text, "");
        assert_eq!(s.nccl, Some("NCCL INFO NCCL version 2.19.3+cuda12.3"));
        let s = split_nccl("[2025-01-01 10:00:00] node-2:7:9 [3] NCCL WARN NET/IB : oops");
        assert_eq!(
            (s.text.as_str(), s.nccl),
            ("", Some("NCCL WARN NET/IB : oops"))
        );
        let s = split_nccl("[1,5]<stdout>:node2:11:11 [5] NCCL INFO Connected all rings");
        assert_eq!(s.nccl, Some("NCCL INFO Connected all rings"));
        let s = split_nccl("n1:1:2 [0] 1234.567 init.cc:99 NCCL TRACE hello");
        assert_eq!((s.text.as_str(), s.nccl), ("", Some("NCCL TRACE hello")));
        let s = split_nccl("10-0-0-1:5:5 [0] NCCL INFO Bootstrap");
        assert_eq!((s.text.as_str(), s.nccl), ("", Some("NCCL INFO Bootstrap")));
        let s = split_nccl("NCCL version 2.28.9+cuda13.0");
        assert_eq!(s.nccl, Some("NCCL version 2.28.9+cuda13.0"));
    }

    #[test]
    fn row_fragments_glued_to_a_prefix() {
        let s = split_nccl(
            "           8             2     float     sum      -1node1:2345:2345 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
        );
        assert_eq!(
            s.text,
            "           8             2     float     sum      -1"
        );
        assert!(s.nccl.unwrap().starts_with("NCCL INFO Channel 00/0"));
        let s = split_nccl("     9.51    0.00    0.00       0n2:1:1 [1] NCCL INFO x");
        assert_eq!(s.text, "     9.51    0.00    0.00       0");
        let s = split_nccl("   1.0   N/A[2025-01-01 10:00:00] n2:1:1 [1] NCCL WARN x");
        assert_eq!(s.text, "   1.0   N/A");
    }

    #[test]
    fn plain_lines_pass_through() {
        let s = split_nccl(
            "#  Rank  0 Group  0 Pid   1300 on         vm device  0 [0000:00:06] NVIDIA H200",
        );
        assert_eq!(s.nccl, None);
        assert!(s.text.starts_with("#  Rank"));
    }
}
