//! Loading NCCL from wrong places gives typed, one-line errors, never a panic.

#![cfg(feature = "nccl")]

use std::io::Write;

use erdma::nccl::{
    DEFAULT_LIBRARY_NAMES, DataType, Group, GroupStatus, NCCL_LIBRARY_ENV, Nccl, NcclError, Version,
};

/// Held by the tests that load a real NCCL by path and by the one that checks
/// the default search: once a `libnccl.so.2` is loaded by path, a dlopen of
/// that name finds it too, so the default search must not be checked while
/// another test loads one (it made `Nccl::load()` and `default_nccl_loadable()`
/// disagree once in CI).
static LOADING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn loading() -> std::sync::MutexGuard<'static, ()> {
    LOADING.lock().unwrap_or_else(|e| e.into_inner())
}

fn default_nccl_loadable() -> bool {
    DEFAULT_LIBRARY_NAMES.iter().any(|name| {
        // SAFETY: loading libnccl runs only its initializers.
        unsafe { libloading::Library::new(*name) }.is_ok()
    })
}

#[test]
fn nonexistent_path_is_library_not_found() {
    let e = // SAFETY: no such file: nothing is loaded.
    unsafe { Nccl::load_from("/nonexistent/dir/libnccl.so.2") }.unwrap_err();
    match &e {
        NcclError::LibraryNotFound { tried, detail } => {
            assert_eq!(tried, &["/nonexistent/dir/libnccl.so.2".to_string()]);
            assert!(detail.contains("No such file"), "{detail}");
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    let s = e.to_string();
    assert!(
        s.starts_with("/nonexistent/dir/libnccl.so.2 not found: "),
        "{s}"
    );
    assert!(s.contains("ERDMA_NCCL_LIBRARY"), "{s}");
    assert!(!s.contains('\n'));
    assert_eq!(e.exit_status(), 3);
}

#[test]
fn a_library_that_is_not_nccl_is_refused() {
    let e = // SAFETY: the C library, whose initializers already ran, exports no ncclGetVersion.
    unsafe { Nccl::load_from("libc.so.6") }.unwrap_err();
    assert_eq!(
        e,
        NcclError::NotNccl {
            library: "libc.so.6".into(),
            symbol: "ncclGetVersion",
        }
    );
    assert_eq!(
        e.to_string(),
        "libc.so.6 is not a usable NCCL library: it lacks ncclGetVersion; hint: point ERDMA_NCCL_LIBRARY at libnccl.so.2 (NCCL >= 2.19)"
    );
    assert_eq!(e.exit_status(), 3);
}

#[test]
fn a_file_that_is_not_a_library_is_library_not_found() {
    let path = std::env::temp_dir().join(format!("erdma-not-a-library-{}.so", std::process::id()));
    let mut f = std::fs::File::create(&path).expect("temp file");
    f.write_all(b"this is not an ELF file\n").expect("write");
    drop(f);
    let e = // SAFETY: not an ELF file: the loader refuses it.
    unsafe { Nccl::load_from(&path) }.unwrap_err();
    let _ = std::fs::remove_file(&path);
    match &e {
        NcclError::LibraryNotFound { detail, .. } => assert!(!detail.is_empty()),
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    assert!(!e.to_string().contains('\n'));
}

#[test]
fn a_directory_is_library_not_found() {
    let e = // SAFETY: a directory: the loader refuses it.
    unsafe { Nccl::load_from(std::env::temp_dir()) }.unwrap_err();
    assert!(matches!(e, NcclError::LibraryNotFound { .. }), "{e:?}");
}

#[test]
fn default_search_reports_both_names_or_loads_a_supported_nccl() {
    let _serial = loading();
    if std::env::var_os(NCCL_LIBRARY_ENV).is_some() {
        // The override is exercised by nccl_env_*.rs; here it would change the meaning.
        let _ = Nccl::load();
        return;
    }
    match Nccl::load() {
        Ok(nccl) => {
            assert!(default_nccl_loadable());
            assert!(nccl.version() >= Version::MIN_SUPPORTED);
        }
        Err(NcclError::LibraryNotFound { tried, detail }) => {
            assert!(!default_nccl_loadable());
            assert_eq!(tried, ["libnccl.so.2", "libnccl.so"]);
            assert!(detail.starts_with("libnccl.so.2: "), "{detail}");
        }
        Err(other) => panic!("unexpected {other:?}"),
    }
    // Cached: the second call gives the same answer.
    assert_eq!(
        Nccl::load().map(|n| n.version()),
        Nccl::load().map(|n| n.version())
    );
}

/// Real NCCL releases, listed as `VERSION=PATH` entries separated by `:` in
/// `ERDMA_TEST_NCCL_LIBS` (scripts/test.sh names the 2.19.3, 2.28.3 and 2.28.9 libraries of
/// NVIDIA's wheels that scripts/setup.sh fetches). Each loads without a GPU, reports its
/// release, and has exactly the optional entry points and data types of that release: the
/// oldest supported NCCL works with the same binary as the newest.
#[test]
fn real_nccl_releases_load_with_the_features_of_their_version() {
    let _serial = loading();
    let Ok(list) = std::env::var("ERDMA_TEST_NCCL_LIBS") else {
        eprintln!("skipped: ERDMA_TEST_NCCL_LIBS is not set (scripts/test.sh sets it)");
        return;
    };
    let mut seen = Vec::new();
    for entry in list.split(':').filter(|e| !e.is_empty()) {
        let (release, path) = entry
            .split_once('=')
            .expect("ERDMA_TEST_NCCL_LIBS: VERSION=PATH");
        let want: Version = release.parse().expect("ERDMA_TEST_NCCL_LIBS: a version");
        let nccl = // SAFETY: NVIDIA's NCCL releases, fetched by scripts/setup.sh.
        unsafe { Nccl::load_from(path) }.unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(nccl.version(), want, "{path}");
        assert_eq!(nccl.path(), path);
        assert_eq!(
            nccl.has_window_register(),
            want >= Version::WINDOW_REGISTER,
            "{want}"
        );
        assert_eq!(
            nccl.has_native_alltoall(),
            want >= Version::NATIVE_ALLTOALL,
            "{want}"
        );
        assert_eq!(
            nccl.has_native_gather_scatter(),
            want >= Version::NATIVE_ALLTOALL,
            "{want}"
        );
        assert_eq!(
            nccl.has_device_api(),
            want >= Version::new(2, 28, 0),
            "{want}"
        );
        for fp8 in [DataType::Float8e4m3, DataType::Float8e5m2] {
            let ok = fp8.check_supported(nccl.version(), (9, 0));
            assert_eq!(ok.is_ok(), want >= Version::FP8, "{want}: {ok:?}");
        }
        assert!(
            DataType::Bfloat16
                .check_supported(nccl.version(), (9, 0))
                .is_ok()
        );
        seen.push(want);
    }
    assert!(!seen.is_empty(), "ERDMA_TEST_NCCL_LIBS lists no library");
}

/// Issue 34 hole 2: NCCL launches a nested group's operations at the outermost
/// `ncclGroupEnd`, after an inner group's borrows ended. A `Group` is always the outermost:
/// it does not start inside another group, no unguarded start or end runs inside it, and
/// one kept open for ever (`mem::forget`) cannot be ended by `end_unguarded`. Group calls
/// need no GPU: each release of `ERDMA_TEST_NCCL_LIBS` is checked, each on a fresh thread
/// (NCCL's group depth is per thread).
#[test]
fn groups_do_not_nest() {
    let _serial = loading();
    let Ok(list) = std::env::var("ERDMA_TEST_NCCL_LIBS") else {
        eprintln!("skipped: ERDMA_TEST_NCCL_LIBS is not set (scripts/test.sh sets it)");
        return;
    };
    for entry in list.split(':').filter(|e| !e.is_empty()) {
        let (_, path) = entry.split_once('=').expect("VERSION=PATH");
        // SAFETY: NVIDIA's NCCL releases, fetched by scripts/setup.sh.
        let nccl = unsafe { Nccl::load_from(path) }.unwrap_or_else(|e| panic!("{path}: {e}"));
        let usage = |r: Result<(), NcclError>| matches!(r, Err(NcclError::InvalidArgument { .. }));
        std::thread::scope(|s| {
            s.spawn(|| {
                let outer = Group::start(nccl).unwrap();
                assert!(
                    usage(Group::start(nccl).map(|_| ())),
                    "{path}: nested Group::start"
                );
                assert!(
                    usage(Group::start_unguarded(nccl)),
                    "{path}: start_unguarded inside"
                );
                assert!(
                    usage(Group::end_unguarded(nccl).map(|_| ())),
                    "{path}: end_unguarded inside"
                );
                assert_eq!(outer.end().unwrap(), GroupStatus::Complete);
                // Unguarded groups nest among themselves, but no Group starts inside.
                Group::start_unguarded(nccl).unwrap();
                assert!(
                    usage(Group::start(nccl).map(|_| ())),
                    "{path}: Group in unguarded"
                );
                Group::end_unguarded(nccl).unwrap();
                // Nothing open any more: a Group starts and ends.
                Group::start(nccl).unwrap().end().unwrap();
            })
            .join()
            .unwrap();
            s.spawn(|| {
                // A group never ended: nothing on this thread can end it.
                std::mem::forget(Group::start(nccl).unwrap());
                assert!(
                    usage(Group::end_unguarded(nccl).map(|_| ())),
                    "{path}: forgotten group ended"
                );
                assert!(
                    usage(Group::start(nccl).map(|_| ())),
                    "{path}: Group after forget"
                );
            })
            .join()
            .unwrap();
        });
    }
}
