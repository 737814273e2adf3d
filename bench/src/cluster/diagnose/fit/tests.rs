//! The fit on synthetic matrices over many seeds: noise alone, a mildly
//! slow host (the case a line per cell turned into hundreds of path
//! suspects), a slow link, hosts with no cells.

use super::*;
use crate::cluster::diagnose::k_sigma;
use crate::cluster::schedule::Rng;

/// `n` hosts at 100 Gb/s, log-normal noise of standard deviation `sigma`,
/// per-cell factors from `f(client, server)`; the log matrix.
fn matrix(n: usize, sigma: f64, seed: u64, f: impl Fn(usize, usize) -> f64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    let mut m = vec![f64::NAN; n * n];
    for c in 0..n {
        for s in (0..n).filter(|&s| s != c) {
            m[c * n + s] = (100.0 * f(c, s)).ln() + sigma * rng.normal();
        }
    }
    m
}

/// The hosts whose send or receive effect is under `k` standard errors
/// (k for every effect judged on the NIC).
fn slow_hosts(fit: &Fit) -> Vec<usize> {
    let k = k_sigma(2 * fit.n);
    (0..fit.n)
        .filter(|&h| {
            fit.send[h] < -k * fit.effect_se(fit.send_cells[h])
                || fit.receive[h] < -k * fit.effect_se(fit.receive_cells[h])
        })
        .collect()
}

/// The cells whose residual is under `k` sigmas (k for every cell judged).
fn low_cells(fit: &Fit) -> Vec<(usize, usize)> {
    let n = fit.n;
    let k = k_sigma(n * (n - 1));
    (0..n)
        .flat_map(|c| (0..n).map(move |s| (c, s)))
        .filter(|&(c, s)| fit.residual(c, s).is_some_and(|r| r < -k * fit.sigma))
        .collect()
}

#[test]
fn noise_alone_flags_nothing_and_the_noise_is_measured() {
    let mut hosts = 0;
    let mut cells = 0;
    for seed in 0..20 {
        let fit = Fit::new(matrix(100, 0.015, seed, |_, _| 1.0), 100).unwrap();
        assert!(
            (fit.sigma / 0.015 - 1.0).abs() < 0.1,
            "seed {seed}: sigma {}",
            fit.sigma
        );
        assert!((fit.overall.exp() - 100.0).abs() < 0.5, "{}", fit.overall);
        hosts += slow_hosts(&fit).len();
        cells += low_cells(&fit).len();
    }
    // k is set for a 1% chance per NIC of any: 20 clusters, at most one.
    assert!(hosts <= 1, "{hosts} hosts flagged by noise alone");
    assert!(cells <= 1, "{cells} cells flagged by noise alone");
}

/// Issue 36's case: a host at 0.9 (and 0.92, 0.95) is one slow host, on
/// both sides, and leaves no low cell behind; a line per cell made it
/// hundreds of link and direction suspects.
#[test]
fn a_mildly_slow_host_is_one_host_and_no_path() {
    for factor in [0.90, 0.92, 0.95] {
        for seed in 0..10 {
            let slow = 17;
            let f = |c: usize, s: usize| if c == slow || s == slow { factor } else { 1.0 };
            let fit = Fit::new(matrix(300, 0.015, seed, f), 300).unwrap();
            assert_eq!(slow_hosts(&fit), vec![slow], "factor {factor} seed {seed}");
            let want = f64::ln(factor);
            for e in [fit.send[slow], fit.receive[slow]] {
                assert!((e - want).abs() < 0.01, "factor {factor}: effect {e}");
            }
            assert_eq!(low_cells(&fit), vec![], "factor {factor} seed {seed}");
        }
    }
}

#[test]
fn a_host_slow_on_one_side_only() {
    for seed in 0..10 {
        let fit = Fit::new(
            matrix(64, 0.015, seed, |c, _| if c == 5 { 0.9 } else { 1.0 }),
            64,
        )
        .unwrap();
        let k = k_sigma(2 * 64);
        assert!(
            fit.send[5] < -k * fit.effect_se(fit.send_cells[5]),
            "seed {seed}"
        );
        assert!(fit.receive[5].abs() < k * fit.effect_se(fit.receive_cells[5]));
        assert_eq!(low_cells(&fit), vec![], "seed {seed}");
    }
}

/// A slow link stays in its two residuals; its hosts' effects barely move
/// (one cell in a row of n - 1).
#[test]
fn a_slow_link_is_two_low_residuals() {
    for seed in 0..10 {
        let link = |c: usize, s: usize| (c, s) == (3, 9) || (c, s) == (9, 3);
        let fit = Fit::new(
            matrix(100, 0.015, seed, |c, s| if link(c, s) { 0.8 } else { 1.0 }),
            100,
        )
        .unwrap();
        assert_eq!(low_cells(&fit), vec![(3, 9), (9, 3)], "seed {seed}");
        assert_eq!(slow_hosts(&fit), Vec::<usize>::new(), "seed {seed}");
        for (c, s) in [(3, 9), (9, 3)] {
            let r = fit.residual(c, s).unwrap();
            assert!((r - f64::ln(0.8)).abs() < 0.06, "seed {seed}: {r}");
        }
    }
}

/// Four hosts as in the rig: a slow host is found on both sides although
/// half the cells are its own.
#[test]
fn four_hosts_one_slow() {
    for seed in 0..20 {
        let f = |c: usize, s: usize| if c == 2 || s == 2 { 0.3 } else { 1.0 };
        let fit = Fit::new(matrix(4, 0.05, seed, f), 4).unwrap();
        assert_eq!(slow_hosts(&fit), vec![2], "seed {seed}: {fit:?}");
    }
}

/// Healthy hosts that really differ (a spread of 3% between hosts, on top
/// of the cells' noise) widen the effects' standard error: none of them is
/// a fault because its median is known to a few hundredths of a percent.
#[test]
fn hosts_that_really_differ_are_not_each_a_fault() {
    let mut flagged = 0;
    for seed in 0..10 {
        let mut rng = Rng::new(1000 + seed);
        let host: Vec<f64> = (0..200).map(|_| 1.0 + 0.015 * rng.normal()).collect();
        let fit = Fit::new(matrix(200, 0.015, seed, |c, s| host[c] * host[s]), 200).unwrap();
        assert!(fit.effect_spread > 0.01, "{}", fit.effect_spread);
        flagged += slow_hosts(&fit).len();
    }
    assert!(flagged <= 1, "{flagged}");
}

#[test]
fn hosts_without_cells_and_tiny_matrices() {
    let n = 6;
    let mut m = matrix(n, 0.02, 1, |_, _| 1.0);
    for o in 0..n {
        m[4 * n + o] = f64::NAN;
        m[o * n + 4] = f64::NAN;
    }
    let fit = Fit::new(m, n).unwrap();
    assert!(fit.send[4].is_nan() && fit.receive[4].is_nan());
    assert_eq!((fit.send_cells[4], fit.receive_cells[4]), (0, 0));
    assert!(fit.residual(4, 0).is_none());
    assert!(slow_hosts(&fit).is_empty());
    // Two or three hosts leave no residuals to measure the noise with.
    assert!(Fit::new(vec![f64::NAN; 4], 2).is_none());
    assert!(Fit::new(matrix(2, 0.02, 1, |_, _| 1.0), 2).is_none());
    assert!(Fit::new(matrix(3, 0.02, 1, |_, _| 1.0), 3).is_none());
    let fit = Fit::new(matrix(4, 0.02, 1, |_, _| 1.0), 4).unwrap();
    assert!(fit.sigma.is_finite() && fit.overall.is_finite());
}

#[test]
fn the_median_of_even_and_odd_lengths() {
    assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&mut []), None);
}
