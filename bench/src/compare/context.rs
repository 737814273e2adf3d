//! What the runs' contexts share and where they differ, for the header of
//! the comparison.

use super::model::Run;

/// The contexts split into what all runs share and what differs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Keys with the same value in every run.
    pub common: Vec<(String, String)>,
    /// Keys with different values: one value per run (None: the file does
    /// not say).
    pub differs: Vec<(String, Vec<Option<String>>)>,
    /// Keys with one value where known, unknown for some runs (a text log
    /// records less than a JSON file).
    pub partial: Vec<(String, Vec<Option<String>>)>,
}

/// Compares the runs' contexts, keys in order of first appearance.
pub fn diff(runs: &[Run]) -> Diff {
    let mut keys: Vec<&str> = Vec::new();
    for r in runs {
        for (k, _) in &r.context.0 {
            if !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
    }
    let mut d = Diff::default();
    for k in keys {
        let vals: Vec<Option<String>> = runs
            .iter()
            .map(|r| r.context.get(k).map(String::from))
            .collect();
        let mut known: Vec<&String> = vals.iter().flatten().collect();
        known.dedup();
        let all_known = vals.iter().all(Option::is_some);
        match known.as_slice() {
            [one] if all_known => d.common.push((k.to_string(), (*one).clone())),
            [_] => d.partial.push((k.to_string(), vals)),
            _ => d.differs.push((k.to_string(), vals)),
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::model::Format;

    #[test]
    fn shared_and_differing_keys() {
        let mut a = Run::new("a", Format::NcclText);
        a.context.set("gpu", "NVIDIA H200");
        a.context.set("nccl", "2.19.3");
        let mut b = Run::new("b", Format::NcclJson);
        b.context.set("gpu", "NVIDIA H200");
        b.context.set("nccl", "2.28.9");
        b.context.set("env", "NCCL_IB_GID_INDEX=1");
        let mut c = Run::new("c", Format::NcclJson);
        c.context.set("gpu", "NVIDIA H200");
        c.context.set("env", "NCCL_IB_GID_INDEX=1");
        let d = diff(&[a, b, c]);
        assert_eq!(d.common, [("gpu".to_string(), "NVIDIA H200".to_string())]);
        assert_eq!(d.differs.len(), 1);
        assert_eq!(d.differs[0].0, "nccl");
        assert_eq!(d.differs[0].1[2], None);
        let env = Some("NCCL_IB_GID_INDEX=1".to_string());
        assert_eq!(
            d.partial,
            [("env".to_string(), vec![None, env.clone(), env])]
        );
    }
}
