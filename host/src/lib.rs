//! weir
pub mod batch;
pub mod operator;
