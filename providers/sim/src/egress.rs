//! The simulated cloud's egress bill: every checkpoint a job's workers read in another region
//! than the one it was written in, at the cloud's rate per GB ([`SimConfig::egress_per_gb`]).
//! The simulated workers report the transfers as they restore, as a real cloud would meter the
//! bytes; the closed loop adds the bill to what the instances cost.

use chrono::{DateTime, Utc};
use tern_cloud::{Region, egress_dollars};

use super::SimCloud;

/// One checkpoint copied across regions.
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    pub at: DateTime<Utc>,
    pub job: String,
    pub from: Region,
    pub to: Region,
    pub gb: f64,
    pub dollars: f64,
}

impl SimCloud {
    /// `job`'s workers in `to` read its `gb` checkpoint from `from`: billed, unless both are
    /// one region. The dollars billed.
    pub fn transfer(&self, job: &str, from: &Region, to: &Region, gb: f64) -> f64 {
        let dollars = egress_dollars(gb, self.config.egress_per_gb, from.as_str(), to.as_str());
        if dollars > 0.0 {
            let at = self.now();
            self.egress().push(Transfer {
                at,
                job: job.to_owned(),
                from: from.clone(),
                to: to.clone(),
                gb,
                dollars,
            });
        }
        dollars
    }

    /// Every cross-region transfer billed so far, in order.
    pub fn transfers(&self) -> Vec<Transfer> {
        self.egress().clone()
    }

    /// The egress bill so far, in dollars.
    pub fn egress_bill(&self) -> f64 {
        self.egress().iter().map(|t| t.dollars).sum()
    }
}
