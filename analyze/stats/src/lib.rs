//! Small, dependency-free statistics for bmoe: the three percentile rules the reference scripts use,
//! means and medians, a seeded random generator, percentile bootstrap confidence intervals,
//! Student's t (CDF and quantile) for mean ± CI across repetitions, and one run's decode
//! statistics ([`RunStats`]: warm-up trim and tok/s), shared by bmoe-analyze and bmoe-bench.
//!
//! Everything here is deterministic: a bootstrap with the same seed and input gives the same
//! interval on every machine, so reports and golden tests can quote it.

mod bootstrap;
mod percentile;
mod rng;
mod run;
mod student_t;

pub use bootstrap::{BootstrapCi, RatioCi, bootstrap_mean_ci, bootstrap_ratio_of_means_ci};
pub use percentile::{
    mean, median, percentile_floor_index, percentile_linear, percentile_nearest_floor,
};
pub use rng::SplitMix64;
pub use run::RunStats;
pub use student_t::{t_cdf, t_quantile};
