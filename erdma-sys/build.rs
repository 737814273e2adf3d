//! Chooses the FFI bindings: the checked-in ones (default) or ones generated
//! from the system rdma-core headers (feature `bindgen`).
//!
//! Default: nothing runs. `src/generated/{types,ibverbs,rdmacm}.rs` are the
//! bindgen output for rdma-core's stable ABI on x86_64 Linux, committed, so a
//! build needs neither the rdma-core headers nor libclang (docs.rs, minimal
//! containers, a new user's laptop). `scripts/check-bindings.sh` regenerates
//! them and fails on any difference, so they cannot drift from the headers.
//!
//! Feature `bindgen`: three bindgen passes over `wrapper.h` into `OUT_DIR`,
//! which `src/lib.rs` then includes instead:
//! 1. `types.rs`: structs, unions, enums (as plain integer constants: the
//!    library can return values this build never heard of) and constants;
//!    no functions.
//! 2. `ibverbs.rs`: the exported libibverbs functions as a struct of function
//!    pointers resolved with `libloading` at run time (`Ibverbs`).
//! 3. `rdmacm.rs`: the same for librdmacm (`Rdmacm`).
//!
//! Either way nothing links against libibverbs/librdmacm: binaries start on
//! hosts without rdma-core and report the missing library themselves.
//! The static-inline verbs of `verbs.h` are written in Rust in `src/inline.rs`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "bindgen")]
    generate::run();
}

#[cfg(feature = "bindgen")]
mod generate {
    use std::env;
    use std::path::PathBuf;

    pub fn run() {
        println!("cargo:rerun-if-changed=wrapper.h");
        println!("cargo:rerun-if-env-changed=ERDMA_SYS_INCLUDE");
        let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));

        // Extra include directories (colon separated) for rdma-core installed
        // outside the default search path.
        let extra: Vec<String> = env::var("ERDMA_SYS_INCLUDE")
            .map(|v| {
                v.split(':')
                    .filter(|s| !s.is_empty())
                    .map(|s| format!("-I{s}"))
                    .collect()
            })
            .unwrap_or_default();

        let base = || {
            bindgen::Builder::default()
                .header("wrapper.h")
                .clang_args(&extra)
                .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
                .layout_tests(false)
                .generate_comments(false)
                .prepend_enum_name(false)
                .default_enum_style(bindgen::EnumVariation::Consts)
                .wrap_unsafe_ops(true)
        };

        let fail = |what: &str, e: bindgen::BindgenError| -> ! {
            eprintln!(
                "erdma-sys: bindgen failed on {what}: {e}\n\
                 the `bindgen` feature needs the rdma-core development headers: \
                 apt-get install libibverbs-dev librdmacm-dev (Debian/Ubuntu), \
                 dnf install rdma-core-devel (RHEL/Fedora); set ERDMA_SYS_INCLUDE \
                 for a non-standard prefix. bindgen also needs libclang (apt-get install libclang-dev). \
                 Without the feature the checked-in bindings need neither."
            );
            std::process::exit(1);
        };

        // 1. Types and constants.
        let types = base()
            .allowlist_type("ibv_.*|_compat_ibv_port_attr|verbs_.*|rdma_.*|ib_uverbs_.*")
            .allowlist_var("IBV_.*|RDMA_.*|IB_UVERBS_.*|RAI_.*|AF_INET6?|SOCK_STREAM")
            .ignore_functions()
            .derive_default(true)
            .derive_debug(true)
            .derive_copy(true)
            .generate()
            .unwrap_or_else(|e| fail("types", e));
        types
            .write_to_file(out.join("types.rs"))
            .expect("write types.rs");

        // 2./3. Functions, one run-time-loaded struct per library. Types come
        // from pass 1 (allowlist_recursively(false)).
        for (file, lib, funcs) in [
            ("ibverbs.rs", "Ibverbs", "ibv_.*|_ibv_.*"),
            ("rdmacm.rs", "Rdmacm", "rdma_.*"),
        ] {
            let b = base()
                .allowlist_function(funcs)
                .allowlist_recursively(false)
                .dynamic_library_name(lib)
                .dynamic_link_require_all(false)
                .generate()
                .unwrap_or_else(|e| fail(file, e));
            b.write_to_file(out.join(file)).expect("write bindings");
        }
    }
}
