//! The `-J` JSON file in nccl-tests' schema version 3, written the way
//! nccl-tests writes it (compact, incrementally, in the same key order),
//! quirks included: booleans as the strings "true"/"false", doubles with
//! `%lf`, NaN as the string "nan", strings cut at the first non-ASCII or
//! control character, and an existing file never overwritten (FILE.0,
//! FILE.1, ... are tried: see [`super::file`]).

use std::io::{self, Write};

use crate::nccltests::cfmt;

/// The schema version nccl-tests 2.19.6 writes.
pub const JSON_FILE_VERSION: i32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Key,
    ObjectEmpty,
    ObjectSome,
    ListEmpty,
    ListSome,
}

/// An incremental JSON writer with nccl-tests' state machine.
pub struct JsonWriter<W: Write> {
    out: W,
    states: Vec<State>,
    /// The first write error; later writes are skipped.
    error: Option<io::Error>,
}

/// `sanitizeJson`: escapes `"` `\` `/` tab and newline; stops at the first
/// other control or non-ASCII byte; at most 2047 bytes.
pub fn sanitize(s: &str) -> String {
    const LIM: usize = 2048;
    let mut out = String::new();
    for b in s.bytes() {
        if out.len() + 1 >= LIM {
            break;
        }
        match b {
            b'"' | b'\\' | b'/' | b'\t' | b'\n' => {
                if out.len() + 2 > LIM {
                    break;
                }
                out.push('\\');
                out.push(match b {
                    b'\n' => 'n',
                    b'\t' => 't',
                    _ => b as char,
                });
            }
            0x20..=0x7e => out.push(b as char),
            _ => break,
        }
    }
    out
}

impl<W: Write> JsonWriter<W> {
    /// A writer over `out`.
    pub fn new(out: W) -> Self {
        JsonWriter {
            out,
            states: Vec::new(),
            error: None,
        }
    }

    fn raw(&mut self, s: &str) {
        if self.error.is_none()
            && let Err(e) = self.out.write_all(s.as_bytes())
        {
            self.error = Some(e);
        }
    }

    fn top(&self) -> Option<State> {
        self.states.last().copied()
    }

    fn replace_top(&mut self, s: State) {
        if let Some(t) = self.states.last_mut() {
            *t = s;
        }
    }

    /// Emits a key inside an object.
    pub fn key(&mut self, name: &str) {
        match self.top() {
            Some(State::ObjectEmpty) => self.replace_top(State::ObjectSome),
            Some(State::ObjectSome) => self.raw(","),
            _ => {}
        }
        let k = sanitize(name);
        self.raw(&format!("\"{k}\":"));
        self.states.push(State::Key);
    }

    fn value_prefix(&mut self) {
        match self.top() {
            Some(State::ListEmpty) => self.replace_top(State::ListSome),
            Some(State::ListSome) => self.raw(","),
            Some(State::Key) => {
                self.states.pop();
            }
            _ => {}
        }
    }

    /// Opens an object.
    pub fn start_object(&mut self) {
        self.value_prefix();
        self.raw("{");
        self.states.push(State::ObjectEmpty);
    }

    /// Closes the innermost object.
    pub fn finish_object(&mut self) {
        self.states.pop();
        self.raw("}");
    }

    /// Opens a list.
    pub fn start_list(&mut self) {
        self.value_prefix();
        self.raw("[");
        self.states.push(State::ListEmpty);
    }

    /// Closes the innermost list.
    pub fn finish_list(&mut self) {
        self.states.pop();
        self.raw("]");
    }

    /// `null`.
    pub fn null(&mut self) {
        self.value_prefix();
        self.raw("null");
    }

    /// A sanitized string.
    pub fn string(&mut self, s: &str) {
        self.value_prefix();
        let v = sanitize(s);
        self.raw(&format!("\"{v}\""));
    }

    /// A boolean, as nccl-tests writes it: the string "true" or "false".
    pub fn boolean(&mut self, b: bool) {
        self.string(if b { "true" } else { "false" });
    }

    /// An integer (`%d` / `%zu`).
    pub fn int(&mut self, v: i64) {
        self.value_prefix();
        self.raw(&v.to_string());
    }

    /// An unsigned integer (`%zu`).
    pub fn uint(&mut self, v: u64) {
        self.value_prefix();
        self.raw(&v.to_string());
    }

    /// A double with `%lf`; NaN as the string "nan".
    pub fn double(&mut self, v: f64) {
        self.value_prefix();
        if v.is_nan() {
            self.raw("\"nan\"");
        } else {
            self.raw(&cfmt::lf(v));
        }
    }

    /// Whether only the top-level object is open.
    pub fn at_top_level(&self) -> bool {
        self.states.len() == 1 && matches!(self.top(), Some(State::ObjectEmpty | State::ObjectSome))
    }

    /// Closes what is open inside the top-level object (a run that failed
    /// in the middle of a row), so that more top-level keys can follow.
    pub fn close_to_top(&mut self) {
        while self.states.len() > 1 {
            match self.top() {
                Some(State::Key) => self.null(),
                Some(State::ObjectEmpty | State::ObjectSome) => self.finish_object(),
                Some(State::ListEmpty | State::ListSome) => self.finish_list(),
                None => {}
            }
        }
    }

    /// Closes everything still open (a dangling key gets `null`).
    pub fn finish_all(&mut self) {
        while let Some(s) = self.top() {
            match s {
                State::Key => self.null(),
                State::ObjectEmpty | State::ObjectSome => self.finish_object(),
                State::ListEmpty | State::ListSome => self.finish_list(),
            }
        }
    }

    /// Flushes and returns the first write error, if any.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_machine_commas_and_quirks() {
        let mut w = JsonWriter::new(Vec::new());
        w.start_object();
        w.key("version");
        w.int(3);
        w.key("list");
        w.start_list();
        w.string("a/b");
        w.boolean(true);
        w.double(f64::NAN);
        w.double(1.5);
        w.finish_list();
        w.key("dangling");
        w.finish_all();
        let s = String::from_utf8(w.into_inner()).unwrap();
        assert_eq!(
            s,
            r#"{"version":3,"list":["a\/b","true","nan",1.500000],"dangling":null}"#
        );
    }

    #[test]
    fn a_run_cut_short_closes_to_the_top_level() {
        let mut w = JsonWriter::new(Vec::new());
        w.start_object();
        w.key("results");
        w.start_list();
        w.start_object();
        w.key("size");
        w.close_to_top();
        assert!(w.at_top_level());
        w.key("errors");
        w.start_list();
        w.string("Test timeout");
        w.finish_all();
        let s = String::from_utf8(w.into_inner()).unwrap();
        assert_eq!(
            s,
            r#"{"results":[{"size":null}],"errors":["Test timeout"]}"#
        );
    }

    #[test]
    fn sanitize_stops_at_non_ascii() {
        assert_eq!(sanitize("ab\"c\td"), "ab\\\"c\\td");
        assert_eq!(sanitize("héllo"), "h");
        assert_eq!(sanitize(&"x".repeat(3000)).len(), 2047);
    }
}
