//! `bmoe-top`: the live telemetry panel for bmoe runs, in the terminal.
//!
//! Four sources feed one state: a spawned engine (`bmoe-top -- bmoe-cli … --progress`), an
//! engine session driven from a prompt line (`bmoe-top --session -- bmoe-cli … --session`), the
//! protocol on stdin (`bmoe-cli … --progress | bmoe-top`), and a recorded metrics CSV
//! (`bmoe-top --replay run.csv`). The state ([`state`]) is a fold over [`model::Event`]s, the
//! drawing ([`ui`]) a pure function of that state, and the figures ([`figures`]) small
//! functions tested against hand-worked values. Parsing is `bmoe-telemetry`'s; [`decode`]
//! only translates its records into events.

pub mod argv;
pub mod clean;
pub mod decode;
pub mod figures;
pub mod keys;
pub mod model;
pub mod replay;
pub mod session;
pub mod source;
pub mod state;
pub mod theme;
pub mod ui;
