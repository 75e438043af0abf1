//! The guaranteed-delivery core of tidings (placeholder map, completed below).

pub mod knowledge;
pub mod names;
pub mod ranges;
