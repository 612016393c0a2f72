//! Small, dependency-free statistics for bmoe: the three percentile rules the reference scripts use,
//! means and medians, a seeded random generator, percentile bootstrap confidence intervals, and
//! Student's t (CDF and quantile) for mean ± CI across repetitions.
//!
//! Everything here is deterministic: a bootstrap with the same seed and input gives the same
//! interval on every machine, so reports and golden tests can quote it.

mod bootstrap;
mod percentile;
mod rng;
mod student_t;

pub use bootstrap::{BootstrapCi, RatioCi, bootstrap_mean_ci, bootstrap_ratio_of_means_ci};
pub use percentile::{
    mean, median, percentile_floor_index, percentile_linear, percentile_nearest_floor,
};
pub use rng::SplitMix64;
pub use student_t::{t_cdf, t_quantile};
