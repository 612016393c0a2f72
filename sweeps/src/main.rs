//! `bmoe-bench`: synthetic models and benchmark sweeps.
fn main() {}
