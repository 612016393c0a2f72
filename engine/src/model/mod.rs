//! The model file: the architecture registry and the built-in default model.

pub mod default_model;
pub mod registry;
