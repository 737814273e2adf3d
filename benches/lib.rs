//! Criterion benchmarks of erdma; see the `[[bench]]` targets.
