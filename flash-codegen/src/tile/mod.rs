//! Tile layer: fragment layouts, shared-memory layouts and the copies between them.

pub mod acc;
pub mod convert;
pub mod copy;
pub mod desc;
pub mod frag;
pub mod smem;
