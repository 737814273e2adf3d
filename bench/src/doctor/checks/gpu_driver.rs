//! The NVIDIA driver and the GPUs, through the CUDA driver API loaded at run
//! time (no context is created).

use crate::doctor::hints;
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "gpu.driver",
    group: Group::Gpu,
    about: "CUDA driver loads and GPUs are visible",
    run,
};

/// 12040 -> `12.4`.
pub fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    match h.gpus() {
        Err(e) => Outcome::fail(
            e.clone(),
            hints::fix(
                h,
                "docker run --gpus all (needs nvidia-container-toolkit on the host); on a host without GPUs: --skip gpu",
                "install the NVIDIA driver (nvidia-smi must work); on a host without GPUs: --skip gpu",
            ),
        ),
        Ok(g) if g.gpus.is_empty() => Outcome::fail(
            format!(
                "CUDA {} driver, but no GPU visible",
                cuda_version(g.driver_version)
            ),
            "check CUDA_VISIBLE_DEVICES and nvidia-smi; in Docker: --gpus all",
        ),
        Ok(g) => {
            let mut names: Vec<(String, Vec<usize>)> = Vec::new();
            for gpu in &g.gpus {
                match names.iter_mut().find(|(n, _)| *n == gpu.name) {
                    Some((_, v)) => v.push(gpu.ordinal),
                    None => names.push((gpu.name.clone(), vec![gpu.ordinal])),
                }
            }
            let kinds: Vec<String> = names
                .iter()
                .map(|(n, v)| format!("{}x {n}", v.len()))
                .collect();
            Outcome::ok(format!(
                "{} GPU{}: {}; driver supports CUDA {}",
                g.gpus.len(),
                if g.gpus.len() == 1 { "" } else { "s" },
                kinds.join(", "),
                cuda_version(g.driver_version)
            ))
            .details(serde_json::json!({
                "driver_cuda_version": g.driver_version,
                "gpus": g.gpus.iter().map(|x| serde_json::json!({"ordinal": x.ordinal, "name": x.name, "pci": x.pci})).collect::<Vec<_>>(),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::host::Gpus;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn gpus_listed() {
        let o = FakeHost::erdma_gpu().run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(o.found, "8 GPUs: 8x NVIDIA H200; driver supports CUDA 12.4");
    }

    #[test]
    fn no_driver_fails_with_docker_flag() {
        let h = FakeHost::bare();
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(o.found.starts_with("libcuda.so.1 not found"), "{}", o.found);
        h.file("/.dockerenv", "");
        assert!(
            h.run(CHECK)
                .fix
                .unwrap()
                .starts_with("docker run --gpus all")
        );
        let mut h = FakeHost::bare();
        h.gpus = Ok(Gpus {
            driver_version: 13000,
            gpus: vec![],
        });
        assert_eq!(h.run(CHECK).found, "CUDA 13.0 driver, but no GPU visible");
    }
}
