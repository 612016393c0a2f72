//! The graph side: the eval-callback hook that sees every routing decision.

pub mod hook;
