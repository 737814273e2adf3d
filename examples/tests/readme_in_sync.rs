//! README.md shows examples/readme.rs verbatim; the rig runs that file, so the
//! README's example is compiled and run by the tests.

#[test]
fn readme_shows_examples_readme_rs() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let example = std::fs::read_to_string(format!("{root}/examples/readme.rs")).expect("readme.rs");
    let block = format!("```rust\n{example}```\n");
    assert!(
        readme.contains(&block),
        "README.md's ```rust block differs from examples/readme.rs: copy the file into the README"
    );
}
