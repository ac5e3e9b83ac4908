//! weir
