//! Checks on the repository itself: the layering table, the code map and the release profile.

mod architecture;
mod build_profile;
mod layers;
