//! `scripts/gpu/gpu_health_compare.py`, the comparer of
//! `scripts/gpu/gpu-health-check.sh`, on what a real H100 gave (driver
//! 580.159.04: erdma-doctor's --json and nvidia-smi -q -x before and after,
//! in tests/data/gpu-health-h100): every value agrees; a value changed on
//! either side is named and the exit status is 1.
#![allow(clippy::disallowed_methods)] // a test reads and writes its files directly

use std::path::{Path, PathBuf};
use std::process::Command;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpu-health-h100")
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu/gpu_health_compare.py")
}

/// A copy of the H100's files, `edit`ed, compared: (exit status, output).
fn compare(name: &str, edit: impl Fn(&Path)) -> (i32, String) {
    let d = std::env::temp_dir().join(format!("gpu-health-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for e in std::fs::read_dir(data()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
    }
    edit(&d);
    let out = Command::new("python3")
        .arg(script())
        .arg(&d)
        .output()
        .expect("python3 (scripts/setup.sh installs it)");
    std::fs::remove_dir_all(&d).unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn replace(p: &Path, from: &str, to: &str) {
    let s = std::fs::read_to_string(p).unwrap();
    assert!(s.contains(from), "{from} not in {}", p.display());
    std::fs::write(p, s.replacen(from, to, 1)).unwrap();
}

#[test]
fn the_h100_agrees() {
    let (code, out) = compare("same", |_| {});
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("summary: 39 agree, 0 differ"), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    // The thresholds came from T.Limit (driver 580 prints no absolute ones).
    assert!(
        out.contains("PASS  GPU 0 (00000000:00:06.0) temperature slowdown_c (from T.Limit): doctor 89 vs nvidia-smi 89.0"),
        "{out}"
    );
}

#[test]
fn a_value_that_differs_is_named() {
    let (code, out) = compare("doctor", |d| {
        let j = d.join("doctor.json");
        replace(
            &j,
            r#""dram_uncorrected":0,"sram_corrected":0,"sram_uncorrected":0,"uncorrected":0}}]"#,
            r#""dram_uncorrected":3,"sram_corrected":0,"sram_uncorrected":0,"uncorrected":3}}]"#,
        );
        replace(&j, r#""slowdown_c":89"#, r#""slowdown_c":80"#);
    });
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAIL  GPU 0 (00000000:00:06.0) ecc volatile dram_uncorrected: doctor 3 vs nvidia-smi 0"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "FAIL  GPU 0 (00000000:00:06.0) temperature slowdown_c (from T.Limit): doctor 80"
        ),
        "{out}"
    );
    assert!(out.contains("summary: 37 agree, 2 differ"), "{out}");

    let (code, out) = compare("smi", |d| {
        replace(
            &d.join("smi-before.xml"),
            "<remapped_row_pending>No",
            "<remapped_row_pending>Yes",
        );
        replace(
            &d.join("smi-before.xml"),
            "<persistence_mode>Enabled",
            "<persistence_mode>Disabled",
        );
        std::fs::write(d.join("xid-count.txt"), "1\n").unwrap();
    });
    assert_eq!(code, 1, "{out}");
    for f in [
        "FAIL  GPU 0 (00000000:00:06.0) remapped rows pending: doctor False vs nvidia-smi True",
        "FAIL  GPU 0 (00000000:00:06.0) persistence: doctor True vs nvidia-smi False",
        "FAIL  XID lines in the kernel log: doctor 0 vs nvidia-smi 1",
    ] {
        assert!(out.contains(f), "{f}:\n{out}");
    }
}

#[test]
fn temperature_and_power_move_within_the_two_readings() {
    // The doctor read 33 C and 70.1 W between nvidia-smi's two readings.
    let (code, out) = compare("moving", |d| {
        replace(&d.join("smi-after.xml"), "<gpu_temp>33 C", "<gpu_temp>36 C");
        replace(
            &d.join("doctor.json"),
            r#""temperature_c":33"#,
            r#""temperature_c":35"#,
        );
    });
    assert_eq!(code, 0, "{out}");
    let (code, out) = compare("hot", |d| {
        replace(
            &d.join("doctor.json"),
            r#""temperature_c":33"#,
            r#""temperature_c":45"#,
        );
        replace(
            &d.join("doctor.json"),
            r#""power_mw":70113"#,
            r#""power_mw":170113"#,
        );
    });
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL  GPU 0 (00000000:00:06.0) temperature C: doctor 45"),
        "{out}"
    );
    assert!(
        out.contains("FAIL  GPU 0 (00000000:00:06.0) power draw W: doctor 170.113"),
        "{out}"
    );
}
