//! temp
pub mod cfmt;
pub mod cparse;
pub mod getopt;
pub mod types;
pub mod verifiable;
