//! drop (in progress).
