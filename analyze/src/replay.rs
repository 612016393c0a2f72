//! replay (in progress).
