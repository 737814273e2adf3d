//! Everything the benchmark writes: the stdout report ([`text`]), the `-J`
//! JSON file ([`json`]) and the `--csv` file ([`csv`]), driven together by
//! [`Output`] at the points where nccl-tests writes them; both files also
//! carry the run's [`context`].

pub mod context;
pub mod csv;
pub mod file;
pub mod json;
pub mod text;
mod writer;

pub use writer::{IterReport, Output, RowResult};
