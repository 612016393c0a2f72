//! The model file: what its headers say ([`facts`]), where its tensors live ([`index`]), the
//! architectures bmoe can stream ([`registry`]) and the built-in tiny model
//! ([`default_model`]).

pub mod default_model;
pub mod facts;
pub mod index;
pub mod registry;
