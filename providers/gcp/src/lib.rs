//! tern's GCP provider: Compute Engine GPU VMs through google-cloud-rust (`instances.insert`,
//! `bulkInsert` for gangs, spot scheduling), offers from the zones' machine and accelerator
//! types priced by the bundled catalog, and spot preemptions read from `zoneOperations`.
//!
//! The only crate that imports google-cloud-rust. Everything it does goes through
//! [`tern_cloud::Provider`]; its error codes are mapped in [`errors`], its label syntax in
//! [`labels`], and the IAM permissions it needs are listed in [`permissions`].

mod compute;
mod config;
pub mod errors;
pub mod labels;
mod offers;
pub mod permissions;
mod provider;

#[cfg(feature = "fake")]
pub mod fake;

pub use config::GcpConfig;
pub use provider::GcpProvider;
