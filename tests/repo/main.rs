//! Checks on the repository itself: the layering table, the code map, the release profile and
//! the promises in `promises.rs` (file lengths, names ARCHITECTURE.md uses).

mod architecture;
mod build_profile;
mod layers;
mod promises;
