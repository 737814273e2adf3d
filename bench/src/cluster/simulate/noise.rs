//! The simulator's noise models (`--noise SPEC...`, stated in
//! docs/cluster-diagnosis.md, "Noise models"): what a healthy run's rate
//! does besides the fault factors. Every spec multiplies in; the first
//! two set the per-run spread and exclude each other.
//!
//! - `gauss:S` (or a plain `S`, e.g. `3%`): `1 + S/2 x N(0,1)`, S the
//!   half-width of the 95% range (2 sigma), as `--noise 3%` always was;
//! - `t:DF:S`: `1 + S/2 x t(DF)`, a Student t of DF degrees of freedom
//!   (heavy tails: at DF = 3 one run in 100 is more than 4.5 scales off);
//! - `drop:P:F`: each run, with probability P, at F of its rate (a
//!   retransmission burst, a flow rehashed onto a busy path);
//! - `round:S`: one factor `1 + S/2 x N(0,1)` per round, shared by every
//!   flow of that round (congestion from other jobs on the fabric);
//! - `collide:P:F`: flows collide at random when many run at once: in a
//!   round of `m` flows among `H` hosts each flow, with probability
//!   `P x m / H` (P when every host sends one flow), shares a fabric link
//!   with another and runs at F (ECMP hashing two flows onto one uplink).
//!   A retest's few pairs rarely collide.

use crate::cluster::schedule::Rng;

/// The noise of a simulated run.
#[derive(Debug, Clone, PartialEq)]
pub struct Noise {
    /// The per-run spread S (2 sigma, relative): of the normal, or the
    /// scale of the Student t.
    pub spread: f64,
    /// Degrees of freedom of the Student t (none: normal).
    pub t_df: Option<f64>,
    /// A deep drop: probability per run and the factor.
    pub drop: Option<(f64, f64)>,
    /// The round factor's spread (2 sigma, relative; 0: none).
    pub round: f64,
    /// Colliding flows: probability at full load and the factor.
    pub collide: Option<(f64, f64)>,
}

impl Default for Noise {
    fn default() -> Self {
        Noise {
            spread: 0.03,
            t_df: None,
            drop: None,
            round: 0.0,
            collide: None,
        }
    }
}

/// What one round shares: its congestion factor and its load (flows
/// running at once per host).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundDraw {
    /// The factor of every flow of the round.
    pub factor: f64,
    /// The chance that a flow of this round collides with another.
    pub collide: f64,
}

impl RoundDraw {
    /// A round with no congestion and no collision.
    pub const QUIET: RoundDraw = RoundDraw {
        factor: 1.0,
        collide: 0.0,
    };
}

/// The lowest share of its rate a run keeps under noise: a run that
/// moved nothing would have failed, not measured.
const FLOOR: f64 = 0.02;

impl Noise {
    /// From the `--noise` specs (none: the default, +-3% normal).
    pub fn parse(specs: &[String]) -> Result<Noise, String> {
        let mut n = Noise::default();
        let mut spread_set = false;
        for spec in specs {
            let bad = |why: &str| {
                format!(
                    "--noise {spec}: {why}; one of S (e.g. 3%), gauss:S, t:DF:S, drop:P:F, \
                     round:S, collide:P:F"
                )
            };
            let frac = |s: &str, what: &str| {
                super::fraction(s)
                    .map_err(|_| bad(&format!("'{s}' is not {what} (a fraction from 0 to 0.5)")))
            };
            let factor = |s: &str| {
                s.parse::<f64>()
                    .ok()
                    .filter(|f| *f > 0.0 && *f < 1.0)
                    .ok_or_else(|| bad(&format!("'{s}' is not a factor between 0 and 1")))
            };
            let prob = |s: &str| {
                let p = s.strip_suffix('%').map_or_else(
                    || s.parse::<f64>().ok(),
                    |p| p.parse::<f64>().ok().map(|x| x / 100.0),
                );
                p.filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| bad(&format!("'{s}' is not a probability (0 to 1, or 0-100%)")))
            };
            let parts: Vec<&str> = spec.split(':').collect();
            let mut spread = |s: f64, df: Option<f64>| {
                if spread_set {
                    return Err(bad(
                        "a second per-run spread: give one of S, gauss:S, t:DF:S",
                    ));
                }
                spread_set = true;
                n.spread = s;
                n.t_df = df;
                Ok(())
            };
            match parts.as_slice() {
                [s] => spread(frac(s, "a spread such as 3%")?, None)?,
                ["gauss", s] => spread(frac(s, "a spread such as 3%")?, None)?,
                ["t", df, s] => {
                    let df = df
                        .parse::<f64>()
                        .ok()
                        .filter(|d| (1.0..=1000.0).contains(d))
                        .ok_or_else(|| {
                            bad(&format!("'{df}' is not a degree of freedom (1 to 1000)"))
                        })?;
                    spread(frac(s, "a scale such as 3%")?, Some(df))?
                }
                ["drop", p, f] => n.drop = Some((prob(p)?, factor(f)?)),
                ["round", s] => n.round = frac(s, "a spread such as 10%")?,
                ["collide", p, f] => n.collide = Some((prob(p)?, factor(f)?)),
                _ => return Err(bad("not a noise model")),
            }
        }
        Ok(n)
    }

    /// The draw a round of `flows` flows among `hosts` hosts shares.
    pub fn round_draw(&self, flows: usize, hosts: usize, rng: &mut Rng) -> RoundDraw {
        let factor = if self.round > 0.0 {
            (1.0 + self.round / 2.0 * rng.normal()).max(FLOOR)
        } else {
            1.0
        };
        let collide = self.collide.map_or(0.0, |(p, _)| {
            (p * flows as f64 / hosts.max(1) as f64).min(1.0)
        });
        RoundDraw { factor, collide }
    }

    /// One run's noise factor, `sigma` its relative standard deviation
    /// (the model's, from the spread, the jitter and the flows sharing the
    /// port), in a round of `round`.
    pub fn factor(&self, sigma: f64, round: RoundDraw, rng: &mut Rng) -> f64 {
        let z = match self.t_df {
            Some(df) => student_t(df, rng),
            None => rng.normal(),
        };
        let mut f = (1.0 + sigma * z).max(FLOOR) * round.factor;
        if let Some((p, x)) = self.drop
            && rng.unit() < p
        {
            f *= x;
        }
        if let Some((_, x)) = self.collide
            && round.collide > 0.0
            && rng.unit() < round.collide
        {
            f *= x;
        }
        f.max(FLOOR)
    }

    /// One line for the report: the models in force.
    pub fn describe(&self) -> String {
        let mut parts = vec![match self.t_df {
            Some(df) => format!("Student t ({df} df), scale +-{:.1}%", 100.0 * self.spread),
            None => format!("+-{:.1}%", 100.0 * self.spread),
        }];
        if let Some((p, f)) = self.drop {
            parts.push(format!("{:.3}% of runs at {f}", 100.0 * p));
        }
        if self.round > 0.0 {
            parts.push(format!("a factor +-{:.1}% per round", 100.0 * self.round));
        }
        if let Some((p, f)) = self.collide {
            parts.push(format!(
                "flows colliding ({:.1}% at full load) at {f}",
                100.0 * p
            ));
        }
        parts.join(", ")
    }
}

/// A Student t draw of `df` degrees of freedom: `N(0,1) / sqrt(chi2 / df)`,
/// the chi-square as twice a gamma of shape `df / 2`.
pub fn student_t(df: f64, rng: &mut Rng) -> f64 {
    let chi2 = 2.0 * gamma(df / 2.0, rng);
    rng.normal() / (chi2 / df).max(1e-300).sqrt()
}

/// A gamma draw of shape `a` (scale 1): Marsaglia and Tsang's method; for
/// `a < 1` the draw of `a + 1` times `U^(1/a)`.
fn gamma(a: f64, rng: &mut Rng) -> f64 {
    if a < 1.0 {
        let u = 1.0 - rng.unit();
        return gamma(a + 1.0, rng) * u.powf(1.0 / a);
    }
    let d = a - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = rng.normal();
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = 1.0 - rng.unit();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        assert_eq!(Noise::parse(&[]), Ok(Noise::default()));
        assert_eq!(Noise::parse(&specs(&["5%"])).unwrap().spread, 0.05);
        let n = Noise::parse(&specs(&[
            "t:3:4%",
            "drop:0.1%:0.5",
            "round:10%",
            "collide:2%:0.5",
        ]))
        .unwrap();
        assert_eq!(
            n,
            Noise {
                spread: 0.04,
                t_df: Some(3.0),
                drop: Some((0.001, 0.5)),
                round: 0.1,
                collide: Some((0.02, 0.5)),
            }
        );
        assert!(
            n.describe().contains("Student t (3 df)"),
            "{}",
            n.describe()
        );
        for (bad, says) in [
            (vec!["gauss:3%", "t:3:3%"], "second per-run spread"),
            (vec!["t:0:3%"], "degree of freedom"),
            (vec!["drop:2:0.5"], "probability"),
            (vec!["drop:0.1:1.5"], "factor"),
            (vec!["round:80%"], "spread"),
            (vec!["pink:3%"], "not a noise model"),
        ] {
            let e = Noise::parse(&specs(&bad)).unwrap_err();
            assert!(e.contains(says) && e.contains(bad[bad.len() - 1]), "{e}");
        }
    }

    /// Each model's draws have the moments it states, over 200,000 runs
    /// and 5 seeds (not one lucky one).
    #[test]
    fn the_draws_have_their_stated_moments() {
        for seed in 0..5 {
            let mut rng = Rng::new(seed);
            let runs = 200_000;
            // t of 5 df: variance 5/3; its quantiles are heavy: P(|t| > 4) = 1.0%.
            let t: Vec<f64> = (0..runs).map(|_| student_t(5.0, &mut rng)).collect();
            let var = t.iter().map(|x| x * x).sum::<f64>() / runs as f64;
            assert!((var - 5.0 / 3.0).abs() < 0.1, "seed {seed}: var {var}");
            let tail = t.iter().filter(|x| x.abs() > 4.0).count() as f64 / runs as f64;
            assert!((0.008..0.0125).contains(&tail), "seed {seed}: tail {tail}");
            // Drops: 1% of runs at half rate.
            let n = Noise::parse(&specs(&["0%", "drop:1%:0.5"])).unwrap();
            let low = (0..runs)
                .filter(|_| n.factor(0.0, RoundDraw::QUIET, &mut rng) < 0.75)
                .count() as f64
                / runs as f64;
            assert!((0.009..0.011).contains(&low), "seed {seed}: drops {low}");
            // Collisions: 10% at full load, a round of half load: 5%.
            let n = Noise::parse(&specs(&["0%", "collide:10%:0.5"])).unwrap();
            let r = n.round_draw(50, 100, &mut rng);
            assert!((r.collide - 0.05).abs() < 1e-12);
            let low = (0..runs)
                .filter(|_| n.factor(0.0, r, &mut rng) < 0.75)
                .count() as f64
                / runs as f64;
            assert!(
                (0.048..0.052).contains(&low),
                "seed {seed}: collisions {low}"
            );
            // A round factor is one per round: its spread across rounds.
            let n = Noise::parse(&specs(&["0%", "round:10%"])).unwrap();
            let f: Vec<f64> = (0..20_000)
                .map(|_| n.round_draw(10, 10, &mut rng).factor)
                .collect();
            let sd = (f.iter().map(|x| (x - 1.0).powi(2)).sum::<f64>() / f.len() as f64).sqrt();
            assert!((sd - 0.05).abs() < 0.002, "seed {seed}: round sd {sd}");
        }
    }
}
