//! `erdma::nccl` on a real GPU with a real NCCL: every collective, data type and operator on
//! one rank, the safe API, CUDA graph capture, registration, nonblocking communicators and
//! the deadline helper. Ignored by default; scripts/gpu/check-nccl-layer.sh runs them with
//! `--ignored` on the GPU machine.
//!
//! With one rank every reduction returns its input, except PreMulSum which multiplies it by
//! the scalar (2 here), so each result is exactly known for every type. Inputs cycle through
//! 1..=4, exact in every format down to fp8 E5M2.

#![cfg(feature = "nccl")]

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use erdma::cuda::{CaptureMode, Device, DeviceBuffer, Stream, copy_dtoh_raw, copy_htod_raw};
use erdma::nccl::{
    Comm, Config, DataType, F8E4M3, Group, GroupStatus, Half, Nccl, NcclError, RankSpec, RedOp,
    ReduceOp, ResultCode, Scalar, wait_all, wait_ready,
};

const WAIT: Option<Duration> = Some(Duration::from_secs(60));

struct Rank1 {
    nccl: &'static Nccl,
    gpu: Device,
    comm: Comm,
    stream: Stream,
}

fn rank1(config: &Config) -> Rank1 {
    let nccl = Nccl::load().unwrap_or_else(|e| panic!("{e}"));
    let gpu = Device::new(0).unwrap_or_else(|e| panic!("{e}"));
    let id = nccl.unique_id().unwrap();
    let comm = Comm::init_rank(nccl, &gpu, 1, 0, &id, config).unwrap_or_else(|e| panic!("{e}"));
    let stream = Stream::new(&gpu).unwrap();
    Rank1 {
        nccl,
        gpu,
        comm,
        stream,
    }
}

/// Bits of the positive integer `v` in a binary float format (exact for the values used).
fn small_float(v: u32, exp_bits: u32, mant_bits: u32) -> u32 {
    let e = 31 - v.leading_zeros();
    let bias = (1 << (exp_bits - 1)) - 1;
    let frac = v - (1 << e);
    let mant = if mant_bits >= e {
        frac << (mant_bits - e)
    } else {
        assert_eq!(frac % (1 << (e - mant_bits)), 0, "{v} not exact");
        frac >> (e - mant_bits)
    };
    ((e + bias) << mant_bits) | mant
}

fn encode(dt: DataType, v: u32) -> Vec<u8> {
    match dt {
        DataType::Int8 | DataType::Uint8 => vec![v as u8],
        DataType::Int32 | DataType::Uint32 => v.to_ne_bytes().to_vec(),
        DataType::Int64 | DataType::Uint64 => u64::from(v).to_ne_bytes().to_vec(),
        DataType::Float32 => (v as f32).to_ne_bytes().to_vec(),
        DataType::Float64 => f64::from(v).to_ne_bytes().to_vec(),
        DataType::Float16 => (small_float(v, 5, 10) as u16).to_ne_bytes().to_vec(),
        DataType::Bfloat16 => (small_float(v, 8, 7) as u16).to_ne_bytes().to_vec(),
        DataType::Float8e4m3 => vec![small_float(v, 4, 3) as u8],
        DataType::Float8e5m2 => vec![small_float(v, 5, 2) as u8],
    }
}

fn pattern(dt: DataType, count: usize, factor: u32) -> Vec<u8> {
    (0..count)
        .flat_map(|i| encode(dt, (i as u32 % 4 + 1) * factor))
        .collect()
}

#[test]
fn float_encodings_match_known_bits() {
    assert_eq!(encode(DataType::Float16, 1), 0x3c00u16.to_ne_bytes());
    assert_eq!(encode(DataType::Float16, 6), 0x4600u16.to_ne_bytes());
    assert_eq!(encode(DataType::Bfloat16, 3), 0x4040u16.to_ne_bytes());
    assert_eq!(encode(DataType::Float8e4m3, 1), [0x38]);
    assert_eq!(encode(DataType::Float8e4m3, 8), [0x50]);
    assert_eq!(encode(DataType::Float8e5m2, 6), [0x46]);
    assert_eq!(encode(DataType::Float8e5m2, 2), [0x40]);
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Coll {
    AllReduce,
    AllReduceInPlace,
    Reduce,
    ReduceScatter,
    Broadcast,
    AllGather,
    AllToAll,
    AllToAllP2p,
    Gather,
    GatherP2p,
    Scatter,
    ScatterP2p,
    SendRecv,
}

impl Coll {
    fn reduces(self) -> bool {
        matches!(
            self,
            Coll::AllReduce | Coll::AllReduceInPlace | Coll::Reduce | Coll::ReduceScatter
        )
    }
}

const ALL_COLLS: [Coll; 13] = [
    Coll::AllReduce,
    Coll::AllReduceInPlace,
    Coll::Reduce,
    Coll::ReduceScatter,
    Coll::Broadcast,
    Coll::AllGather,
    Coll::AllToAll,
    Coll::AllToAllP2p,
    Coll::Gather,
    Coll::GatherP2p,
    Coll::Scatter,
    Coll::ScatterP2p,
    Coll::SendRecv,
];

/// Runs one case at byte offset 512 of two buffers (like a harness rotating offsets) and
/// returns the number of wrong elements.
fn run_case(r: &Rank1, coll: Coll, dt: DataType, op: ReduceOp) -> Result<usize, NcclError> {
    const COUNT: usize = 1000;
    const OFFSET: usize = 512;
    let bytes = COUNT * dt.size();
    let mut send = DeviceBuffer::<u8>::alloc(&r.gpu, OFFSET + bytes)?;
    let mut recv = DeviceBuffer::<u8>::alloc(&r.gpu, OFFSET + bytes)?;
    send.fill_bytes(0xab, &r.stream)?;
    recv.fill_bytes(0xee, &r.stream)?;
    let sp = send.ptr_at(OFFSET)?;
    let rp = recv.ptr_at(OFFSET)?;
    let input = pattern(dt, COUNT, 1);
    let in_place = coll == Coll::AllReduceInPlace;
    // SAFETY: the ranges lie inside the buffers, alive for the whole case.
    unsafe { copy_htod_raw(if in_place { rp } else { sp }, &input, &r.stream)? };
    let pre_mul = if op == ReduceOp::PreMulSum {
        Some(
            r.comm
                .pre_mul_sum(&Scalar::from_bytes(dt, &encode(dt, 2))?)?,
        )
    } else {
        None
    };
    let red = op
        .builtin()
        .or(pre_mul.as_ref().map(|p| p.op()))
        .expect("operator");
    let (c, s) = (&r.comm, &r.stream);
    // SAFETY: every pointer addresses COUNT elements inside live buffers (one rank: every
    // gathered or scattered size equals COUNT); the buffers outlive the wait below.
    unsafe {
        match coll {
            Coll::AllReduce => c.all_reduce_raw(sp, rp, COUNT, dt, red, s)?,
            Coll::AllReduceInPlace => c.all_reduce_raw(rp, rp, COUNT, dt, red, s)?,
            Coll::Reduce => c.reduce_raw(sp, rp, COUNT, dt, red, 0, s)?,
            Coll::ReduceScatter => c.reduce_scatter_raw(sp, rp, COUNT, dt, red, s)?,
            Coll::Broadcast => c.broadcast_raw(sp, rp, COUNT, dt, 0, s)?,
            Coll::AllGather => c.all_gather_raw(sp, rp, COUNT, dt, s)?,
            Coll::AllToAll => c.all_to_all_raw(sp, rp, COUNT, dt, s)?,
            Coll::AllToAllP2p => c.all_to_all_p2p_raw(sp, rp, COUNT, dt, s)?,
            Coll::Gather => c.gather_raw(sp, rp, COUNT, dt, 0, s)?,
            Coll::GatherP2p => c.gather_p2p_raw(sp, rp, COUNT, dt, 0, s)?,
            Coll::Scatter => c.scatter_raw(sp, rp, COUNT, dt, 0, s)?,
            Coll::ScatterP2p => c.scatter_p2p_raw(sp, rp, COUNT, dt, 0, s)?,
            Coll::SendRecv => {
                let g = Group::start(r.nccl)?;
                c.send_raw(sp, COUNT, dt, 0, s)?;
                c.recv_raw(rp, COUNT, dt, 0, s)?;
                assert_eq!(g.end()?, GroupStatus::Complete);
            }
        }
    }
    drop(pre_mul);
    c.wait(s, WAIT)?;
    let mut out = vec![0u8; bytes];
    // SAFETY: rp..rp+bytes lies inside recv.
    unsafe { copy_dtoh_raw(&mut out, rp, s)? };
    let factor = if coll.reduces() && op == ReduceOp::PreMulSum {
        2
    } else {
        1
    };
    let expected = pattern(dt, COUNT, factor);
    let wrong = out
        .chunks(dt.size())
        .zip(expected.chunks(dt.size()))
        .filter(|(a, b)| a != b)
        .count();
    // The bytes before the offset were not touched.
    let mut head = vec![0u8; OFFSET];
    // SAFETY: the first OFFSET bytes of recv.
    unsafe { copy_dtoh_raw(&mut head, recv.device_ptr(), s)? };
    let clobbered = head.iter().filter(|&&b| b != 0xee).count();
    Ok(wrong + clobbered)
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn every_collective_type_and_op_on_one_rank() {
    let r = rank1(&Config::default());
    let cc = r.gpu.compute_capability();
    let types: Vec<DataType> = DataType::ALL
        .into_iter()
        .filter(|&t| r.nccl.check_type(t, &r.gpu).is_ok())
        .collect();
    if r.nccl.version() >= erdma::nccl::Version::FP8 && cc >= (9, 0) {
        assert_eq!(types.len(), 12, "fp8 should be available");
    }
    let mut cases = 0;
    let mut unsupported = 0;
    let mut failures = Vec::new();
    for &dt in &types {
        for coll in ALL_COLLS {
            let ops: &[ReduceOp] = if coll.reduces() {
                &ReduceOp::ALL
            } else {
                &[ReduceOp::Sum]
            };
            for &op in ops {
                cases += 1;
                // What erdma predicts NCCL cannot do (fp8 avg/mulsum on one rank) must be
                // refused by NCCL with ncclInvalidArgument, or, if NCCL learned it, be right.
                let predicted_unsupported =
                    coll.reduces() && dt.check_reduction(op, r.comm.size()).is_err();
                match run_case(&r, coll, dt, op) {
                    Ok(0) => {}
                    Err(NcclError::Call { code, .. })
                        if predicted_unsupported && code == ResultCode::INVALID_ARGUMENT =>
                    {
                        unsupported += 1
                    }
                    Ok(n) => failures.push(format!("{coll:?} {dt} {op}: {n} wrong")),
                    Err(e) => failures.push(format!("{coll:?} {dt} {op}: {e}")),
                }
            }
        }
    }
    println!(
        "NCCL {} ({}), GPU cc {}.{}: {cases} cases over {} types ({}), {unsupported} refused as predicted (fp8 avg/mulsum on one rank), native alltoall {}, gather/scatter {}, window registration {}",
        r.nccl.version(),
        r.nccl.path(),
        cc.0,
        cc.1,
        types.len(),
        types.iter().map(|t| t.name()).collect::<Vec<_>>().join(" "),
        r.nccl.has_native_alltoall(),
        r.nccl.has_native_gather_scatter(),
        r.nccl.has_window_register()
    );
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn safe_api_checks_and_runs() {
    let r = rank1(&Config::default());
    let (c, s, g) = (&r.comm, &r.stream, &r.gpu);
    assert_eq!((c.rank(), c.size()), (0, 1));
    assert_eq!(c.cu_device().unwrap(), 0);
    assert!(c.async_error().unwrap());

    let data: Vec<f32> = (0..4096).map(|i| i as f32).collect();
    let send = DeviceBuffer::from_host(g, &data, s).unwrap();
    let mut recv = DeviceBuffer::<f32>::alloc(g, 4096).unwrap();
    c.all_reduce(&send, &mut recv, RedOp::SUM, s).unwrap();
    c.wait(s, WAIT).unwrap();
    assert_eq!(recv.to_vec(s).unwrap(), data);

    let pm = c.pre_mul_sum(&Scalar::new(3.0f32)).unwrap();
    c.all_reduce_in_place(&mut recv, pm.op(), s).unwrap();
    drop(pm);
    c.wait(s, WAIT).unwrap();
    assert_eq!(
        recv.to_vec(s).unwrap(),
        data.iter().map(|v| v * 3.0).collect::<Vec<_>>()
    );

    let ints = DeviceBuffer::from_host(g, &[5i64, -7, 9], s).unwrap();
    let mut out = DeviceBuffer::<i64>::alloc(g, 3).unwrap();
    c.reduce(&ints, &mut out, RedOp::MAX, 0, s).unwrap();
    c.broadcast_in_place(&mut out, 0, s).unwrap();
    c.all_gather(&ints, &mut out, s).unwrap();
    c.reduce_scatter(&ints, &mut out, RedOp::MIN, s).unwrap();
    c.all_to_all(&ints, &mut out, s).unwrap();
    c.gather(&ints, Some(&mut out), 0, s).unwrap();
    c.scatter(Some(&ints), &mut out, 0, s).unwrap();
    {
        // Inside a group a safe call would only be recorded with its buffers borrowed
        // for the call: refused; the group's own calls keep them borrowed until end().
        let grp = Group::start(r.nccl).unwrap();
        let e = c.send(&ints, 0, s).unwrap_err();
        assert!(matches!(e, NcclError::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().contains("Group::send"), "{e}");
        grp.send(c, &ints, 0, s).unwrap();
        grp.recv(c, &mut out, 0, s).unwrap();
        assert_eq!(grp.end().unwrap(), GroupStatus::Complete);
    }
    c.wait(s, WAIT).unwrap();
    assert_eq!(out.to_vec(s).unwrap(), [5, -7, 9]);

    let halves = DeviceBuffer::from_host(g, &[Half(0x3c00); 8], s).unwrap();
    let mut hout = DeviceBuffer::<Half>::alloc(g, 8).unwrap();
    c.all_reduce(&halves, &mut hout, RedOp::AVG, s).unwrap();
    c.wait(s, WAIT).unwrap();
    assert_eq!(hout.to_vec(s).unwrap(), [Half(0x3c00); 8]);

    // fp8: max works on one rank; avg is refused up front (NCCL's one-rank path lacks it).
    let f8 = DeviceBuffer::from_host(g, &[F8E4M3(0x38); 4], s).unwrap();
    let mut f8o = DeviceBuffer::<F8E4M3>::alloc(g, 4).unwrap();
    let e = c.all_reduce(&f8, &mut f8o, RedOp::AVG, s).unwrap_err();
    assert_eq!(e.exit_status(), 5, "{e}");
    c.all_reduce(&f8, &mut f8o, RedOp::MAX, s).unwrap();
    c.wait(s, WAIT).unwrap();
    assert_eq!(f8o.to_vec(s).unwrap(), [F8E4M3(0x38); 4]);

    // Misuse is a typed error before NCCL sees it.
    let mut short = DeviceBuffer::<f32>::alloc(g, 10).unwrap();
    let e = c.all_reduce(&send, &mut short, RedOp::SUM, s).unwrap_err();
    assert_eq!(e.exit_status(), 6, "{e}");
    assert!(
        e.to_string()
            .contains("receive buffer holds 10 elements, 4096 needed"),
        "{e}"
    );
    let e = c.broadcast_in_place(&mut short, 1, s).unwrap_err();
    assert!(
        e.to_string()
            .contains("root 1 is not below the communicator size 1"),
        "{e}"
    );
    let e = c.gather(&send, None, 0, s).unwrap_err();
    assert!(
        e.to_string().contains("gather root needs a receive buffer"),
        "{e}"
    );
    // An operator NCCL does not know is NCCL's typed error, with its last-error text.
    // SAFETY: valid buffers; only the operator is bogus.
    let e = unsafe {
        c.all_reduce_raw(
            send.device_ptr(),
            recv.device_ptr(),
            4096,
            DataType::Float32,
            RedOp::from_raw(1000),
            s,
        )
    }
    .unwrap_err();
    assert_eq!(e.exit_status(), 3, "{e}");
    println!("bogus operator: {e}");
    c.wait(s, WAIT).unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn graph_capture_replays_collectives() {
    let r = rank1(&Config::default());
    let (c, s, g) = (&r.comm, &r.stream, &r.gpu);
    let mut buf = DeviceBuffer::from_host(g, &vec![1.0f32; 1 << 16], s).unwrap();
    let mut copy = DeviceBuffer::<f32>::alloc(g, 1 << 16).unwrap();
    s.begin_capture(CaptureMode::ThreadLocal).unwrap();
    {
        let pm = c.pre_mul_sum(&Scalar::new(2.0f32)).unwrap();
        c.all_reduce_in_place(&mut buf, pm.op(), s).unwrap();
    }
    c.all_reduce(&buf, &mut copy, RedOp::SUM, s).unwrap();
    let graph = s.end_capture().unwrap();
    assert_eq!(buf.to_vec(s).unwrap()[0], 1.0, "captured work ran");
    let exec = graph.instantiate().unwrap();
    for _ in 0..5 {
        // SAFETY: buf and copy outlive the replays.
        unsafe { exec.launch(s).unwrap() };
    }
    c.wait(s, WAIT).unwrap();
    assert!(buf.to_vec(s).unwrap().iter().all(|&v| v == 32.0));
    assert!(copy.to_vec(s).unwrap().iter().all(|&v| v == 32.0));
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn registration_and_nccl_memory() {
    let r = rank1(&Config::default());
    let (c, s, g) = (&r.comm, &r.stream, &r.gpu);
    let mut reg = r.nccl.mem_alloc(g, 1 << 20).unwrap();
    assert_eq!(reg.byte_len(), 1 << 20);
    reg.fill_bytes(0, s).unwrap();
    let plain = DeviceBuffer::from_host(g, &vec![2.0f32; 1 << 18], s).unwrap();
    // SAFETY: both buffers outlive their registrations (deregistered below).
    let (h1, h2) = unsafe {
        (
            c.register(reg.device_ptr(), reg.byte_len()).unwrap(),
            c.register(plain.device_ptr(), plain.byte_len()).unwrap(),
        )
    };
    // SAFETY: 2^18 floats fit both buffers.
    unsafe {
        c.all_reduce_raw(
            plain.device_ptr(),
            reg.device_ptr(),
            1 << 18,
            DataType::Float32,
            RedOp::SUM,
            s,
        )
        .unwrap()
    };
    c.wait(s, WAIT).unwrap();
    let mut out = vec![0u8; 1 << 20];
    // SAFETY: the whole of reg.
    unsafe { copy_dtoh_raw(&mut out, reg.device_ptr(), s).unwrap() };
    assert!(out.chunks(4).all(|b| b == 2.0f32.to_ne_bytes()));
    // SAFETY: handles from this communicator.
    unsafe {
        c.deregister(h1).unwrap();
        c.deregister(h2).unwrap();
    }
    if r.nccl.has_window_register() {
        // SAFETY: reg outlives the window (deregistered below).
        let w = unsafe { c.window_register(reg.device_ptr(), reg.byte_len(), true) }
            .unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: in place inside the registered window.
        unsafe {
            c.all_reduce_raw(
                reg.device_ptr(),
                reg.device_ptr(),
                1 << 18,
                DataType::Float32,
                RedOp::SUM,
                s,
            )
            .unwrap()
        };
        c.wait(s, WAIT).unwrap();
        // SAFETY: window of this communicator.
        unsafe { c.deregister(w).unwrap() };
        println!("window registration: ok");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn init_all_init_ranks_and_groups() {
    let nccl = Nccl::load().unwrap();
    let gpu = Device::new(0).unwrap();
    let comms = Comm::init_all(nccl, std::slice::from_ref(&gpu)).unwrap();
    assert_eq!(comms.len(), 1);
    let s = Stream::new(&gpu).unwrap();
    let a = DeviceBuffer::from_host(&gpu, &[4u32; 100], &s).unwrap();
    let mut b = DeviceBuffer::<u32>::alloc(&gpu, 100).unwrap();
    let grp = Group::start(nccl).unwrap();
    grp.all_reduce(&comms[0], &a, &mut b, RedOp::PROD, &s)
        .unwrap();
    assert_eq!(grp.end().unwrap(), GroupStatus::Complete);
    let work: Vec<(&Comm, &Stream)> = comms.iter().map(|c| (c, &s)).collect();
    wait_all(&work, WAIT).unwrap();
    assert_eq!(b.to_vec(&s).unwrap(), [4; 100]);
    for c in comms {
        c.destroy().unwrap();
    }

    // Two ranks of one communicator on one GPU: refused before NCCL is called.
    let id = nccl.unique_id().unwrap();
    let spec = [
        RankSpec {
            device: gpu.clone(),
            rank: 0,
        },
        RankSpec {
            device: gpu.clone(),
            rank: 1,
        },
    ];
    let e = Comm::init_ranks(nccl, &spec, 2, &id, &Config::default()).unwrap_err();
    assert_eq!(e.exit_status(), 6, "{e}");
    let e = Comm::init_rank(nccl, &gpu, 2, 2, &id, &Config::default()).unwrap_err();
    assert!(
        e.to_string().contains("rank 2 is not below nranks 2"),
        "{e}"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn nonblocking_communicator() {
    let config = Config {
        blocking: false,
        timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    let r = rank1(&config);
    let (c, s, g) = (&r.comm, &r.stream, &r.gpu);
    assert!(!c.is_blocking());
    let a = DeviceBuffer::from_host(g, &vec![3.0f64; 10_000], s).unwrap();
    let mut b = DeviceBuffer::<f64>::alloc(g, 10_000).unwrap();
    c.all_reduce(&a, &mut b, RedOp::SUM, s).unwrap();
    c.wait(s, WAIT).unwrap();
    assert!(b.to_vec(s).unwrap().iter().all(|&v| v == 3.0));
    b.fill_bytes(0, s).unwrap();
    let grp = Group::start(r.nccl).unwrap();
    grp.all_reduce(c, &a, &mut b, RedOp::MAX, s).unwrap();
    if grp.end().unwrap() == GroupStatus::InProgress {
        wait_ready(&[c], WAIT).unwrap();
    }
    c.wait(s, WAIT).unwrap();
    assert!(b.to_vec(s).unwrap().iter().all(|&v| v == 3.0));
    let Rank1 { comm, .. } = r;
    comm.destroy().unwrap();
}

/// Issue 34 holes 2 and 3: a group's end returns only when its operations are enqueued
/// (a nonblocking communicator's `ncclInProgress` is waited out there, since the buffers'
/// borrows end with the call), and nothing that NCCL would finish at a group's end is done
/// inside one: aborting a communicator, creating or destroying a device communicator.
#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn group_ends_when_its_work_is_enqueued_and_refuses_deferred_calls() {
    let config = Config {
        blocking: false,
        timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    let r = rank1(&config);
    let (c, s, g) = (&r.comm, &r.stream, &r.gpu);
    for round in 0..20 {
        let a = DeviceBuffer::from_host(g, &vec![2.0f32; 1 << 16], s).unwrap();
        let mut b = DeviceBuffer::<f32>::alloc(g, 1 << 16).unwrap();
        let grp = Group::start(r.nccl).unwrap();
        grp.all_reduce(c, &a, &mut b, RedOp::SUM, s).unwrap();
        assert_eq!(grp.end().unwrap(), GroupStatus::Complete, "round {round}");
        assert!(
            c.async_error().unwrap(),
            "round {round}: enqueued at the end"
        );
        c.wait(s, WAIT).unwrap();
        assert!(
            b.to_vec(s).unwrap().iter().all(|&v| v == 2.0),
            "round {round}"
        );
    }
    let invalid = |e: NcclError| matches!(e, NcclError::InvalidArgument { .. });
    let grp = Group::start(r.nccl).unwrap();
    assert!(invalid(c.abort().unwrap_err()));
    // SAFETY: any layout: the call is refused before NCCL sees it.
    let layout = unsafe { erdma::nccl::DevCommLayout::new(64, vec![0; 64], 0, 4) }.unwrap();
    let e = c
        .dev_comm_create(&layout, &erdma::nccl::DevRequirements::default())
        .err()
        .unwrap();
    assert!(invalid(e));
    grp.end().unwrap();
    let Rank1 { comm, .. } = r;
    comm.abort().unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn null_stream_and_comm_on_another_thread() {
    let r = rank1(&Config::default());
    let null = Stream::null(&r.gpu);
    let a = DeviceBuffer::from_host(&r.gpu, &[1i8, 2, 3], &null).unwrap();
    let mut b = DeviceBuffer::<i8>::alloc(&r.gpu, 3).unwrap();
    r.comm.all_reduce(&a, &mut b, RedOp::MIN, &null).unwrap();
    r.comm.wait(&null, WAIT).unwrap();
    assert_eq!(b.to_vec(&null).unwrap(), [1, 2, 3]);
    let Rank1 { comm, gpu, .. } = r;
    let ok = std::thread::spawn(move || {
        let s = Stream::new(&gpu).unwrap();
        let a = DeviceBuffer::from_host(&gpu, &[9u8; 64], &s).unwrap();
        let mut b = DeviceBuffer::<u8>::alloc(&gpu, 64).unwrap();
        comm.all_reduce(&a, &mut b, RedOp::SUM, &s).unwrap();
        comm.wait(&s, WAIT).unwrap();
        b.to_vec(&s).unwrap() == [9u8; 64]
    })
    .join()
    .unwrap();
    assert!(ok);
}

static RELEASE: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn block_until_released(_: *mut c_void) {
    while !RELEASE.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL: scripts/gpu/check-nccl-layer.sh runs it"]
fn stuck_stream_times_out_and_aborts() {
    let r = rank1(&Config::default());
    let (c, s, g) = (&r.comm, &r.stream, &r.gpu);
    let a = DeviceBuffer::from_host(g, &[1.0f32; 256], s).unwrap();
    let mut b = DeviceBuffer::<f32>::alloc(g, 256).unwrap();
    // Work that does not finish on its own: a host function holds the stream until a
    // helper releases it at 4 s. The wait gives up at 2 s; ncclCommAbort then frees device
    // memory, which waits for the GPU, i.e. for the release (a stuck NCCL kernel would exit
    // on the abort flag instead).
    // SAFETY: the callback touches only a static.
    unsafe {
        s.launch_host_func(block_until_released, std::ptr::null_mut())
            .unwrap()
    };
    let releaser = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(4));
        RELEASE.store(true, Ordering::Release);
    });
    let t = Instant::now();
    let e = c.wait(s, Some(Duration::from_secs(2))).unwrap_err();
    let took = t.elapsed();
    println!("wait returned after {took:?}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(20),
        "{took:?}"
    );
    assert!(
        matches!(e, NcclError::Timeout { aborted: true, .. }),
        "{e:?}"
    );
    assert_eq!(e.exit_status(), 4, "{e}");
    assert!(
        e.to_string().contains("local ranks not done: 0 (GPU 0)"),
        "{e}"
    );
    println!("timeout: {e}");
    assert!(c.is_aborted());
    let e = c.all_reduce(&a, &mut b, RedOp::SUM, s).unwrap_err();
    assert!(matches!(e, NcclError::Aborted { rank: 0 }), "{e:?}");
    releaser.join().unwrap();
    s.synchronize().unwrap();
}
