//! The nic_bw_matrix example in the rig: `mpirun -np 2` with one rank on
//! rxe0 and one on rxe1 (GIDs through MPI), on siw0/siw1 (RDMA CM), and three
//! ranks; the matrix must show every off-diagonal pair with a bandwidth.

#![cfg(feature = "mpi")]

mod common;

fn check_matrix(text: &str, n: usize) {
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("rank ") && !l.contains(':'))
        .collect();
    assert_eq!(rows.len(), n, "{text}");
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<&str> = row.split_whitespace().skip(2).collect();
        assert_eq!(cells.len(), n, "{row}");
        for (j, c) in cells.iter().enumerate() {
            if i == j {
                assert_eq!(*c, "-");
            } else {
                let v: f64 = c.parse().unwrap_or_else(|_| panic!("{row}"));
                assert!(v > 0.0, "rank {i} -> {j}: {v}\n{text}");
            }
        }
    }
    assert!(text.contains("# slowest: rank"), "{text}");
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn two_ranks_on_rxe_with_gids() {
    let (code, text, _) = common::mpirun(2, &["--devices", "rxe0,rxe1", "-n", "20", "-s", "65536"]);
    assert_eq!(code, Some(0), "{text}");
    check_matrix(&text, 2);
    assert!(
        text.contains("rank 1: ") && text.contains(":rxe1"),
        "{text}"
    );
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn two_ranks_on_siw_with_rdma_cm() {
    if std::env::var("ERDMA_RIG_SIW")
        .map(|s| s.is_empty())
        .unwrap_or(false)
    {
        return;
    }
    let (code, text, _) = common::mpirun(2, &["--devices", "siw0,siw1", "-n", "20", "-s", "65536"]);
    assert_eq!(code, Some(0), "{text}");
    check_matrix(&text, 2);
}

#[test]
#[ignore = "needs RDMA devices: run in the rig"]
fn three_ranks_json() {
    let (code, text, _) = common::mpirun(
        3,
        &[
            "--devices",
            "rxe0,rxe1,rxe0",
            "-n",
            "10",
            "-s",
            "16384",
            "--json",
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("a JSON line");
    let v: serde_json::Value = serde_json::from_str(line).expect("valid JSON");
    let m = v["matrix"].as_array().unwrap();
    assert_eq!(m.len(), 3);
    for (i, row) in m.iter().enumerate() {
        for (j, c) in row.as_array().unwrap().iter().enumerate() {
            assert_eq!(i == j, c.is_null(), "{line}");
        }
    }
}
