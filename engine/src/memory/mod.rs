//! Memory policy: the memory picture, the cache's automatic budget, the dense-weight residency
//! probe and the dense-weight policies.

pub mod autocache;
pub mod dense;
pub mod picture;
pub mod residency;
