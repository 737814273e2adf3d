//! Misuse of the safe API must not compile (trybuild). Each file in
//! tests/ui/ is one misuse; its .stderr is the expected compiler error.

#[test]
fn misuse_does_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    // Misuse of the GPU API (feature `cuda`; compiles without a GPU).
    #[cfg(feature = "cuda")]
    t.compile_fail("tests/ui-cuda/*.rs");
    // Misuse of the NCCL API (feature `nccl`; compiles without a GPU).
    #[cfg(feature = "nccl")]
    t.compile_fail("tests/ui-nccl/*.rs");
}
