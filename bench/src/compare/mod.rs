//! `erdma-compare`: reads any number of result files (nccl-tests and our
//! JSON, CSV and text logs, perftest tables), aligns their rows and shows
//! the runs side by side with ratios to a baseline, what differs between
//! their contexts, and optionally a bandwidth plot.
//!
//! - [`parse`]: format detection and one parser per format, into
//!   [`model::Run`]s.
//! - [`align`]: rows side by side, ratios, marks, per-run summaries.
//! - [`context`]: what the runs' contexts share and where they differ.
//! - [`report`]: the table, `--json`, `--csv`.
//! - [`plot`]: `--plot FILE.svg|png`.
//! - [`cli`]: the command line and exit statuses.

pub mod align;
pub mod cli;
pub mod context;
pub mod model;
pub mod parse;
pub mod plot;
pub mod report;
