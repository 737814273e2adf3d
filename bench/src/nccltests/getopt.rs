//! A GNU `getopt_long` work-alike.
//!
//! nccl-tests parses its command line with glibc's `getopt_long`; a drop-in
//! replacement must accept exactly the same spellings (`-b8`, `-b 8`,
//! `--minbytes=8`, `--minbytes 8`, unambiguous prefixes such as `--minb`,
//! clustered flags such as `-hb8`, argument permutation, `--`) and print the
//! same diagnostics. clap cannot reproduce prefix matching, the glibc message
//! texts or the "diagnose, then keep going" flow, hence this small parser.

/// Whether a long option takes an argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HasArg {
    /// The option takes no argument (`--help`).
    No,
    /// The option requires an argument (`--minbytes 8`).
    Required,
}

/// One long option: its name, whether it takes an argument and the value it
/// reports (its short letter, or an id above 255 for long-only options).
#[derive(Clone, Copy, Debug)]
pub struct LongOpt {
    /// Name without the leading `--`.
    pub name: &'static str,
    /// Argument requirement.
    pub has_arg: HasArg,
    /// Value reported when matched.
    pub val: i32,
}

/// One parse event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// An option with its value and optional argument.
    Opt(i32, Option<String>),
    /// An unknown option or a missing argument; the glibc diagnostic text
    /// (without the trailing newline) is included. getopt reports `'?'`.
    Error(String),
}

/// Iterator state over an argument vector.
pub struct Getopt<'a> {
    args: &'a [String],
    short: &'a str,
    long: &'a [LongOpt],
    optind: usize,
    /// Position inside a cluster of short options (`-hb8`).
    nextchar: usize,
    posixly_correct: bool,
    /// Non-option arguments skipped so far (GNU permutes them to the end).
    operands: Vec<String>,
}

impl<'a> Getopt<'a> {
    /// Starts parsing `args` (with `args[0]` the program name) against a
    /// getopt short-option string such as `"t:g:h"` and long options.
    pub fn new(args: &'a [String], short: &'a str, long: &'a [LongOpt]) -> Self {
        let posixly_correct = std::env::var_os("POSIXLY_CORRECT").is_some();
        Getopt {
            args,
            short,
            long,
            optind: 1,
            nextchar: 0,
            posixly_correct,
            operands: Vec::new(),
        }
    }

    fn prog(&self) -> &str {
        self.args.first().map(String::as_str).unwrap_or("")
    }

    /// Next event, or None when options are exhausted.
    pub fn next_event(&mut self) -> Option<Event> {
        if self.nextchar > 0 {
            return Some(self.short_option());
        }
        loop {
            let arg = self.args.get(self.optind)?;
            if arg == "--" {
                return None;
            }
            if arg.len() < 2 || !arg.starts_with('-') {
                // GNU permutes non-options to the end; since nccl-tests ignores
                // them, skipping is equivalent. POSIXLY_CORRECT stops instead.
                if self.posixly_correct {
                    return None;
                }
                self.operands.push(arg.clone());
                self.optind += 1;
                continue;
            }
            if let Some(body) = arg.strip_prefix("--") {
                self.optind += 1;
                return Some(self.long_option(body));
            }
            self.nextchar = 1;
            return Some(self.short_option());
        }
    }

    /// The non-option arguments in order: those skipped while parsing, then
    /// everything after `--` (or, with POSIXLY_CORRECT, from the first
    /// operand on). Complete once [`Getopt::next_event`] returned `None`.
    pub fn operands(&self) -> Vec<String> {
        let mut v = self.operands.clone();
        let rest = self.args.get(self.optind..).unwrap_or(&[]);
        let rest = match rest.first() {
            Some(a) if a == "--" => &rest[1..],
            _ => rest,
        };
        v.extend(rest.iter().cloned());
        v
    }

    fn short_option(&mut self) -> Event {
        let arg = &self.args[self.optind];
        let bytes = arg.as_bytes();
        let c = bytes[self.nextchar] as char;
        self.nextchar += 1;
        let at_end = self.nextchar >= bytes.len();
        let spec = self.short.find(c).filter(|_| c != ':');
        let Some(pos) = spec else {
            self.finish_cluster(at_end);
            return Event::Error(format!("{}: invalid option -- '{}'", self.prog(), c));
        };
        let takes_arg = self.short.as_bytes().get(pos + 1) == Some(&b':');
        if !takes_arg {
            self.finish_cluster(at_end);
            return Event::Opt(c as i32, None);
        }
        if !at_end {
            let value = arg[self.nextchar..].to_string();
            self.finish_cluster(true);
            return Event::Opt(c as i32, Some(value));
        }
        self.finish_cluster(true);
        match self.args.get(self.optind) {
            Some(v) => {
                self.optind += 1;
                Event::Opt(c as i32, Some(v.clone()))
            }
            None => Event::Error(format!(
                "{}: option requires an argument -- '{}'",
                self.prog(),
                c
            )),
        }
    }

    fn finish_cluster(&mut self, at_end: bool) {
        if at_end {
            self.nextchar = 0;
            self.optind += 1;
        }
    }

    fn long_option(&mut self, body: &str) -> Event {
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let found = match self.lookup(name) {
            Ok(o) => o,
            Err(candidates) if candidates.is_empty() => {
                return Event::Error(format!("{}: unrecognized option '--{}'", self.prog(), body));
            }
            Err(candidates) => {
                let list: String = candidates.iter().map(|c| format!(" '--{c}'")).collect();
                return Event::Error(format!(
                    "{}: option '--{}' is ambiguous; possibilities:{}",
                    self.prog(),
                    body,
                    list
                ));
            }
        };
        match (found.has_arg, inline) {
            (HasArg::No, Some(_)) => Event::Error(format!(
                "{}: option '--{}' doesn't allow an argument",
                self.prog(),
                found.name
            )),
            (HasArg::No, None) => Event::Opt(found.val, None),
            (HasArg::Required, Some(v)) => Event::Opt(found.val, Some(v)),
            (HasArg::Required, None) => match self.args.get(self.optind) {
                Some(v) => {
                    self.optind += 1;
                    Event::Opt(found.val, Some(v.clone()))
                }
                None => Event::Error(format!(
                    "{}: option '--{}' requires an argument",
                    self.prog(),
                    found.name
                )),
            },
        }
    }

    /// Exact match, else a unique prefix match; Err lists the candidates
    /// (empty: unknown).
    fn lookup(&self, name: &str) -> Result<LongOpt, Vec<&'static str>> {
        if let Some(o) = self.long.iter().find(|o| o.name == name) {
            return Ok(*o);
        }
        let matches: Vec<&LongOpt> = self
            .long
            .iter()
            .filter(|o| !name.is_empty() && o.name.starts_with(name))
            .collect();
        match matches.as_slice() {
            [one] => Ok(**one),
            _ => Err(matches.iter().map(|o| o.name).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: &[LongOpt] = &[
        LongOpt {
            name: "minbytes",
            has_arg: HasArg::Required,
            val: 'b' as i32,
        },
        LongOpt {
            name: "maxbytes",
            has_arg: HasArg::Required,
            val: 'e' as i32,
        },
        LongOpt {
            name: "nthreads",
            has_arg: HasArg::Required,
            val: 't' as i32,
        },
        LongOpt {
            name: "ngpus",
            has_arg: HasArg::Required,
            val: 'g' as i32,
        },
        LongOpt {
            name: "help",
            has_arg: HasArg::No,
            val: 'h' as i32,
        },
    ];

    fn run(args: &[&str]) -> Vec<Event> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let mut g = Getopt::new(&v, "b:e:t:g:h", LONG);
        std::iter::from_fn(|| g.next_event()).collect()
    }

    fn opt(c: char, v: &str) -> Event {
        Event::Opt(c as i32, Some(v.to_string()))
    }

    #[test]
    fn short_forms() {
        assert_eq!(
            run(&["p", "-b8", "-e", "1G"]),
            vec![opt('b', "8"), opt('e', "1G")]
        );
        assert_eq!(
            run(&["p", "-hb8"]),
            vec![Event::Opt('h' as i32, None), opt('b', "8")]
        );
        assert_eq!(run(&["p", "-b", "-e"]), vec![opt('b', "-e")]);
    }

    #[test]
    fn long_forms_and_prefixes() {
        assert_eq!(
            run(&["p", "--minbytes=8", "--maxb", "9"]),
            vec![opt('b', "8"), opt('e', "9")]
        );
        assert_eq!(run(&["p", "--help"]), vec![Event::Opt('h' as i32, None)]);
    }

    #[test]
    fn permutation_and_double_dash() {
        assert_eq!(
            run(&["p", "x", "-b", "1", "-", "--", "-e", "2"]),
            vec![opt('b', "1")]
        );
    }

    #[test]
    fn operands_are_kept_in_order() {
        let v: Vec<String> = ["p", "x", "-b", "1", "y", "--", "-e", "2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut g = Getopt::new(&v, "b:e:t:g:h", LONG);
        while g.next_event().is_some() {}
        assert_eq!(g.operands(), vec!["x", "y", "-e", "2"]);
    }

    #[test]
    fn glibc_diagnostics() {
        assert_eq!(
            run(&["p", "-q"]),
            vec![Event::Error("p: invalid option -- 'q'".into())]
        );
        assert_eq!(
            run(&["p", "-b"]),
            vec![Event::Error("p: option requires an argument -- 'b'".into())]
        );
        assert_eq!(
            run(&["p", "--bogus=1"]),
            vec![Event::Error("p: unrecognized option '--bogus=1'".into())]
        );
        assert_eq!(
            run(&["p", "--n", "1"]),
            vec![Event::Error(
                "p: option '--n' is ambiguous; possibilities: '--nthreads' '--ngpus'".into()
            )]
        );
        assert_eq!(
            run(&["p", "--help=1"]),
            vec![Event::Error(
                "p: option '--help' doesn't allow an argument".into()
            )]
        );
        assert_eq!(
            run(&["p", "--minbytes"]),
            vec![Event::Error(
                "p: option '--minbytes' requires an argument".into()
            )]
        );
    }
}
