//! What the erdma-cluster tests share: the job under a real mpirun.

use std::process::Command;

/// `mpirun -np N erdma-cluster ARGS` over Open MPI's TCP/shared-memory
/// transports, with every NCCL_* variable of this process removed (they
/// change the doctor's NCCL checks): (exit status, stdout, stderr).
pub fn mpirun(np: usize, args: &[&str]) -> (Option<i32>, String, String) {
    mpirun_env(np, args, &[])
}

/// [`mpirun`] with `env` set for every rank.
pub fn mpirun_env(np: usize, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    mpirun_with(np, &[], args, env)
}

/// [`mpirun_env`] with options of mpirun's own (`--enable-recovery`).
pub fn mpirun_with(
    np: usize,
    mpirun_opts: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let mut c = launcher(mpirun_opts, env);
    c.arg("-np")
        .arg(np.to_string())
        .arg(env!("CARGO_BIN_EXE_erdma-cluster"))
        .args(args);
    output(c)
}

/// `timeout 300 mpirun` with its options and transports, `env` set and
/// every NCCL_* variable of this process removed; the apps follow.
pub fn launcher(mpirun_opts: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new("timeout");
    c.args(["300", "mpirun", "--allow-run-as-root", "--oversubscribe"])
        .args(mpirun_opts)
        .args(["--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .envs(env.iter().copied());
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") {
            c.env_remove(k);
        }
    }
    c
}

/// Runs `c`: (exit status, stdout, stderr).
pub fn output(mut c: Command) -> (Option<i32>, String, String) {
    let out = c
        .output()
        .expect("run timeout/mpirun (Open MPI installed?)");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The report of rank `i` (in `--json` output) and its check `id`.
pub fn check<'a>(v: &'a serde_json::Value, i: usize, id: &str) -> &'a serde_json::Value {
    v["reports"][i]["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("rank {i} has no check {id}"))
}
