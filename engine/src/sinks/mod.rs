//! The output side: the metrics CSV, the route, compute and io traces, and the end-of-run report.

pub mod compute_trace;
pub mod csv;
pub mod io_trace;
pub mod report;
pub mod route_trace;
