//! temp
pub mod cfmt;
pub mod colls;
pub mod cparse;
pub mod getopt;
pub mod options;
pub mod output;
pub mod types;
pub mod verifiable;
