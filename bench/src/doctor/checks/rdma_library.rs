//! libibverbs loads, and every RDMA device the kernel has is listed by it
//! (a device in sysfs that libibverbs leaves out has no provider library).

use crate::doctor::host::{self, Host};
use crate::doctor::model::{Check, Ctx, Group, Outcome};

/// The check.
pub const CHECK: Check = Check {
    id: "rdma.library",
    group: Group::Rdma,
    about: "libibverbs loads and has a provider for every RDMA device in sysfs",
    run,
};

/// `libibverbs.so.1.14.44.0` -> 44: rdma-core's release is the third number.
fn rdma_core_release(path: &str) -> Option<u32> {
    let file = path.rsplit('/').next()?;
    let v = file.strip_prefix("libibverbs.so.")?;
    v.split('.').nth(2)?.parse().ok()
}

/// `.../libibverbs/librxe-rdmav34.so` -> `rxe`.
fn provider_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let file = file.strip_prefix("lib").unwrap_or(file);
    file.split("-rdmav")
        .next()
        .unwrap_or(file)
        .split(".so")
        .next()
        .unwrap_or(file)
        .to_owned()
}

/// The uverbs node of each device in sysfs: `(device, uverbsN)`.
pub fn uverbs_nodes(h: &dyn Host) -> Vec<(String, String)> {
    host::list(h, "/sys/class/infiniband_verbs")
        .into_iter()
        .filter(|u| u.starts_with("uverbs"))
        .filter_map(|u| {
            let dev = host::read(h, &format!("/sys/class/infiniband_verbs/{u}/ibdev"))?;
            Some((dev.trim().to_owned(), u))
        })
        .collect()
}

/// The kernel driver of an RDMA device (`erdma`, `mlx5_core`), when it has a
/// PCI function.
pub fn kernel_driver(h: &dyn Host, dev: &str) -> Option<String> {
    let d = host::canonical(h, &format!("/sys/class/infiniband/{dev}/device/driver"))?;
    d.rsplit('/').next().map(str::to_owned)
}

fn run(cx: &Ctx) -> Outcome {
    let h = cx.host;
    let rdma = h.rdma();
    let lib = match &rdma.library {
        Ok(l) => l,
        Err(e) => {
            return Outcome::fail(
                e.clone(),
                "install rdma-core's libibverbs and providers (Debian/Ubuntu: apt-get install \
                 ibverbs-providers; RHEL: dnf install rdma-core); eRDMA needs rdma-core >= 43",
            );
        }
    };
    let release = lib.path.as_deref().and_then(rdma_core_release);
    let mut found = match (&lib.path, release) {
        (Some(p), Some(r)) => format!("{p} (rdma-core {r})"),
        (Some(p), None) => p.clone(),
        (None, _) => "libibverbs loaded".to_owned(),
    };
    if !lib.providers.is_empty() {
        // libibverbs loads every installed provider; name those whose device is here.
        let names: Vec<String> = lib.providers.iter().map(|p| provider_name(p)).collect();
        let used: Vec<&String> = names
            .iter()
            .filter(|p| {
                rdma.devices.iter().any(|d| {
                    d.name.starts_with(p.as_str())
                        || kernel_driver(h, &d.name).is_some_and(|k| k.starts_with(p.as_str()))
                })
            })
            .collect();
        let used: Vec<&str> = used.iter().map(|s| s.as_str()).collect();
        found.push_str(&format!(
            "; providers in use: {} ({} installed)",
            if used.is_empty() {
                "none".to_owned()
            } else {
                used.join(", ")
            },
            names.len()
        ));
    }
    // Devices the kernel has but libibverbs does not list.
    let listed: Vec<&str> = rdma.devices.iter().map(|d| d.name.as_str()).collect();
    let nodes = uverbs_nodes(h);
    let mut no_provider = Vec::new();
    let mut no_node = Vec::new();
    for dev in host::list(h, "/sys/class/infiniband") {
        if listed.contains(&dev.as_str()) {
            continue;
        }
        let node = nodes.iter().find(|(d, _)| *d == dev).map(|(_, u)| u);
        let has_node = node.is_some_and(|u| host::exists(h, &format!("/dev/infiniband/{u}")));
        let driver = kernel_driver(h, &dev)
            .map(|d| format!(" (driver {d})"))
            .unwrap_or_default();
        if has_node {
            no_provider.push(format!("{dev}{driver}"));
        } else {
            no_node.push(dev);
        }
    }
    let details = serde_json::json!({
        "path": lib.path, "rdma_core": release, "providers": lib.providers,
        "unlisted_no_provider": no_provider, "unlisted_no_device_node": no_node,
    });
    if !no_provider.is_empty() {
        let old = release.is_some_and(|r| r < 43);
        return Outcome::fail(
            format!(
                "{found}; libibverbs lists no {}: no provider library for {}",
                no_provider.join(", "),
                if no_provider.len() == 1 { "it" } else { "them" }
            ),
            if old {
                "rdma-core older than 43 has no eRDMA provider: install a newer rdma-core \
                 (Debian 12+, Ubuntu 24.04+, or Alibaba's rdma-core package)"
            } else {
                "install the provider: apt-get install ibverbs-providers (dnf install rdma-core); \
                 eRDMA needs rdma-core >= 43"
            },
        )
        .details(details);
    }
    if !no_node.is_empty() {
        found.push_str(&format!(
            "; {} not listed: no /dev/infiniband node (see rdma.dev-nodes)",
            no_node.join(", ")
        ));
    }
    Outcome::ok(found).details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::Status;
    use crate::doctor::testing::FakeHost;

    #[test]
    fn names_and_versions() {
        assert_eq!(
            rdma_core_release("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"),
            Some(44)
        );
        assert_eq!(rdma_core_release("libibverbs.so.1"), None);
        assert_eq!(
            provider_name("/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so"),
            "rxe"
        );
        assert_eq!(provider_name("/usr/lib/libmlx5.so.1.24.44.0"), "mlx5");
    }

    #[test]
    fn healthy_rig() {
        let o = FakeHost::rig().run(CHECK);
        assert_eq!(o.status, Status::Ok, "{o:?}");
        assert!(
            o.found.contains("rdma-core 44")
                && o.found.contains("providers in use: rxe, siw (2 installed)"),
            "{}",
            o.found
        );
    }

    #[test]
    fn missing_library_fails() {
        let mut h = FakeHost::bare();
        h.rdma.library = Err("libibverbs missing: install ...".into());
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail);
        assert!(o.fix.unwrap().contains("ibverbs-providers"));
    }

    #[test]
    fn device_without_provider_fails() {
        let mut h = FakeHost::rig();
        h.dir("/sys/class/infiniband/erdma_0");
        h.file("/sys/class/infiniband_verbs/uverbs9/ibdev", "erdma_0\n");
        h.file("/dev/infiniband/uverbs9", "");
        h.rdma.library = Ok(crate::doctor::host::VerbsLibrary {
            path: Some("/usr/lib/libibverbs.so.1.11.39.0".into()),
            providers: vec![],
        });
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert!(o.found.contains("lists no erdma_0"), "{}", o.found);
        assert!(o.fix.unwrap().contains("older than 43"));
    }

    #[test]
    fn device_without_node_is_left_to_dev_nodes() {
        let h = FakeHost::rig();
        h.dir("/sys/class/infiniband/erdma_0");
        let o = h.run(CHECK);
        assert_eq!(o.status, Status::Ok);
        assert!(
            o.found
                .contains("erdma_0 not listed: no /dev/infiniband node")
        );
    }
}
