use super::*;

fn argv(s: &str) -> Vec<String> {
    std::iter::once("./build/all_reduce_perf")
        .chain(s.split_whitespace())
        .map(String::from)
        .collect()
}

fn run(s: &str) -> (Parsed, Printed) {
    let mut p = Printed::default();
    let r = parse(&argv(s), Features::ALL, 0, &mut p);
    (r, p)
}

fn opts(s: &str) -> Options {
    match run(s).0 {
        Parsed::Run(o) => *o,
        Parsed::Exit(c) => panic!("{s}: exit {c}"),
    }
}

fn exit_of(s: &str) -> (i32, Printed) {
    match run(s) {
        (Parsed::Exit(c), p) => (c, p),
        (Parsed::Run(_), _) => panic!("{s}: expected exit"),
    }
}

#[test]
fn defaults_match_nccl_tests() {
    let o = opts("");
    assert_eq!(o.program_name, "all_reduce_perf");
    assert_eq!(
        (o.nthreads, o.ngpus, o.iters, o.warmup_iters, o.agg_iters),
        (1, 1, 20, 1, 1)
    );
    assert_eq!(
        (o.min_bytes, o.max_bytes, o.step_bytes, o.step_factor),
        (32 << 20, 32 << 20, 1 << 20, 1)
    );
    assert_eq!(
        (o.datacheck, o.average, o.root, o.cta_policy),
        (1, 1, 0, -1)
    );
    assert_eq!(o.op, Some(ReduceOp::Sum));
    assert_eq!(o.dtype, Some(DataType::Float32));
    assert_eq!(o.timeout, DEFAULT_TIMEOUT_S);
    assert_eq!(o.backend, BackendKind::Nccl);
}

#[test]
fn short_long_and_combined_forms() {
    let o = opts("-b8 -e 128M --stepfactor=2 --iters 5 -w0 -c 0 -g 1 -t1");
    assert_eq!(
        (
            o.min_bytes,
            o.max_bytes,
            o.step_factor,
            o.iters,
            o.warmup_iters,
            o.datacheck
        ),
        (8, 128 << 20, 2, 5, 0, 0)
    );
    let o = opts("--minb=1K --maxbytes 1g -d all -o all --backend mpi --csv out.csv -T 0");
    assert_eq!((o.min_bytes, o.max_bytes), (1024, 1 << 30));
    assert_eq!((o.dtype, o.op), (None, None));
    assert_eq!(o.backend, BackendKind::Mpi);
    assert_eq!(o.csv_file.as_deref(), Some("out.csv"));
    assert_eq!(o.timeout, 0);
    assert_eq!(opts("-n 0x10 -m 010").iters, 16);
    assert_eq!(opts("-n 0x10 -m 010").agg_iters, 8);
}

#[test]
fn invalid_type_and_op_default_with_message() {
    let (r, p) = run("-d bogus -o nope");
    let Parsed::Run(o) = r else { panic!() };
    assert_eq!(
        (o.dtype, o.op),
        (Some(DataType::Float32), Some(ReduceOp::Sum))
    );
    assert_eq!(
        p.stdout,
        "invalid type bogus, defaulting to float .. \ninvalid op nope, defaulting to sum .. \n"
    );
    let mut p = Printed::default();
    let old = Features::for_nccl_version(22000);
    let Parsed::Run(o) = parse(&argv("-d f8e4m3"), old, 22000, &mut p) else {
        panic!()
    };
    assert_eq!(o.dtype, Some(DataType::Float32), "fp8 needs NCCL 2.24");
}

#[test]
fn size_errors_exit_255() {
    let (c, p) = exit_of("-b 1T");
    assert_eq!(
        (c, p.stderr.as_str()),
        (255, "invalid size specified for 'minbytes'\n")
    );
    let (c, p) = exit_of("-i x");
    assert_eq!(
        (c, p.stderr.as_str()),
        (255, "invalid size specified for 'stepBytes'\n")
    );
    let (c, p) = exit_of("-b 64 -e 8");
    assert_eq!(
        (c, p.stderr.as_str()),
        (255, "invalid sizes for 'minbytes' and 'maxbytes': 64 > 8\n")
    );
}

#[test]
fn help_and_getopt_errors_exit_0_with_usage() {
    let (c, p) = exit_of("-h -b 1T");
    assert_eq!(c, 0);
    assert!(
        p.stdout
            .starts_with("USAGE: all_reduce_perf \n\t[-t,--nthreads <num threads>] \n\t")
    );
    assert!(p.stdout.ends_with("[-h,--help]\n"));
    let (c, p) = exit_of("-q");
    assert_eq!(c, 0);
    assert_eq!(p.stderr, "./build/all_reduce_perf: invalid option -- 'q'\n");
    assert!(p.stdout.starts_with("invalid option '?'\nUSAGE: "));
    let (c, p) = exit_of("--n 2");
    assert_eq!(c, 0);
    assert!(
        p.stderr
            .contains("is ambiguous; possibilities: '--nthreads' '--ngpus'")
    );
}

#[test]
fn warnings_that_disable() {
    let (r, p) = run("-I 2 -K 3");
    let Parsed::Run(o) = r else { panic!() };
    assert_eq!((o.per_iter_timing, o.per_iter_skip), (0, 0));
    assert_eq!(
        p.stderr,
        "per-iteration timing (-I) only supports 0=off or 1=on. Disabling.\nper-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.\n"
    );
    let (r, p) = run("-z 3 -G 2 -I 1 -K 20");
    let Parsed::Run(o) = r else { panic!() };
    assert_eq!((o.blocking, o.per_iter_timing, o.per_iter_skip), (0, 0, 0));
    assert!(p.stderr.contains("must be between 0 and 19"));
    let (c, _) = exit_of("-D 1");
    assert_eq!(c, 255, "-D needs -R 2");
}

#[test]
fn version_gated_options() {
    let mut p = Printed::default();
    let Parsed::Run(o) = parse(&argv("-R 2 -x 2"), Features::ALL, 22600, &mut p) else {
        panic!()
    };
    assert_eq!((o.local_register, o.cta_policy), (1, -1));
    assert!(
        p.stdout
            .contains("Option -R 2 (symmetric) is not supported before NCCL 2.27")
    );
    let mut p = Printed::default();
    assert!(matches!(
        parse(&argv("-V 4"), Features::ALL, 22600, &mut p),
        Parsed::Exit(255)
    ));
    assert_eq!(
        p.stderr,
        "Option -V (device CTA count) requires NCCL >= 2.28.0\n"
    );
    let (r, p) = run("-V 500");
    let Parsed::Run(o) = r else { panic!() };
    assert_eq!(o.device_cta_count, 16);
    assert!(p.stderr.contains("got 500. Using default value 16."));
}

#[test]
fn inputs_that_would_hang_nccl_tests_are_rejected() {
    assert_eq!(exit_of("-b 0 -e 8").0, 255);
    assert_eq!(exit_of("-b 8 -e 8 -i 0").0, 255);
    assert_eq!(exit_of("-t 0").0, 255);
    assert_eq!(exit_of("-g -1").0, 255);
    assert_eq!(exit_of("-a 7").0, 255);
    assert_eq!(exit_of("--backend cuda").0, 255);
}

#[test]
fn size_sweeps() {
    assert_eq!(opts("-b 8 -e 128 -f 2").sizes(), vec![8, 16, 32, 64, 128]);
    assert_eq!(opts("-b 8 -e 8G -f 4").sizes().len(), 16);
    assert_eq!(
        opts("-b 1K -e 4K -i 1K").sizes(),
        vec![1024, 2048, 3072, 4096]
    );
    assert_eq!(opts("-b 10 -e 100 -f 3").sizes(), vec![10, 30, 90]);
    assert_eq!(opts("-b 8 -e 100 -f 2").warmup_sizes(), vec![8, 16, 32, 64]);
    let huge = opts("-b 1 -e 18446744073709551615 -f 16");
    assert_eq!(huge.sizes().len(), 16, "stops before overflowing");
    assert_eq!(opts("").sizes(), vec![32 << 20]);
}

#[test]
fn prescan_finds_backend() {
    assert_eq!(
        prescan_backend(&argv("-b 8 --backend=host")),
        BackendKind::Host
    );
    assert_eq!(prescan_backend(&argv("--backend bogus")), BackendKind::Nccl);
}
