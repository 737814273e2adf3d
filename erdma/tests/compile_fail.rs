//! Misuse of the safe API must not compile (trybuild). Each file in
//! tests/ui/ is one misuse; its .stderr is the expected compiler error.

#[test]
fn misuse_does_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
