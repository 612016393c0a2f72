//! Small, dependency-free statistics for bmoe: the three percentile rules the reference scripts use,
//! means and medians, a seeded random generator, and percentile bootstrap confidence intervals.
//!
//! Everything here is deterministic: a bootstrap with the same seed and input gives the same
//! interval on every machine, so reports and golden tests can quote it.

mod bootstrap;
mod percentile;
mod rng;

pub use bootstrap::{BootstrapCi, RatioCi, bootstrap_mean_ci, bootstrap_ratio_of_means_ci};
pub use percentile::{
    mean, median, percentile_floor_index, percentile_linear, percentile_nearest_floor,
};
pub use rng::SplitMix64;
