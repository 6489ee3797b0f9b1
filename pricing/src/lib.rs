//! Prices for tern: SkyPilot v8 catalogs (AWS and GCP layouts), the snapshot bundled into the
//! binary, offer queries, and the price history kept in SQLite.
//!
//! Live price APIs (AWS DescribeSpotPriceHistory, GCP Cloud Billing Catalog) belong to the
//! provider crates; they feed the same [`PriceHistory`].

mod bundled;
mod catalog;
mod history;
mod query;

pub use bundled::bundled;
pub use catalog::{Catalog, CatalogError, Layout, gcp_host_for};
pub use history::{HistoryError, PriceHistory, PricePoint, SnapshotSummary};
pub use query::{AcceleratorFilter, OfferQuery, QueryError, suggest};
