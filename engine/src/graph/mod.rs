//! The graph side: the eval-callback hook that sees every node llama.cpp computes, the one parser
//! of node names, and the recorders that turn routings and node timings into trace rows. This is
//! where routing is read today and where it will be edited (drop, substitute, route-ahead,
//! replay): the sinks only ever receive finished rows.

pub mod arena;
pub mod device_share;
pub mod edit;
pub mod hook;
pub mod names;
pub mod predict;
pub mod rank_worker;
pub mod read_steps;
pub mod replay;
pub mod routes;
pub mod span;
pub mod steer;
pub mod timing;
