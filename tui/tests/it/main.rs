//! Every integration test of `bmoe-top` in one binary: one link instead of five, and the helpers
//! in [`common`] compiled once for all of them.

mod cli;
mod common;
mod not_benchmark;
mod panel;
mod session;
mod terminal;
