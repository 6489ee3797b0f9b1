//! Selecting offers: the filters behind `tern offers`, and name validation with suggestions.

use std::cmp::Ordering;
use std::str::FromStr;

use tern_cloud::{Capacity, Cloud, Offer};

use crate::Catalog;

/// `NAME[:COUNT]`, e.g. `A100:8`, `T4`, `tpu-v5p-8` (a TPU slice name already says its size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceleratorFilter {
    pub name: String,
    /// Accelerators per VM; `None` for any count.
    pub count: Option<u32>,
}

impl FromStr for AcceleratorFilter {
    type Err = QueryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| QueryError::InvalidAccelerator {
            input: s.to_owned(),
            reason: reason.to_owned(),
        };
        let (name, count) = match s.split_once(':') {
            None => (s.trim(), None),
            Some((name, count)) => {
                let n: u32 = count
                    .trim()
                    .parse()
                    .map_err(|_| bad("the count after ':' must be a whole number"))?;
                if n == 0 {
                    return Err(bad("the count after ':' must be at least 1"));
                }
                (name.trim(), Some(n))
            }
        };
        if name.is_empty() {
            return Err(bad("expected NAME[:COUNT], e.g. A100:8"));
        }
        Ok(Self {
            name: name.to_owned(),
            count,
        })
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    #[error("invalid accelerator '{input}': {reason}")]
    InvalidAccelerator { input: String, reason: String },
    #[error("unknown accelerator '{name}'{}", did_you_mean(.suggestions))]
    UnknownAccelerator {
        name: String,
        suggestions: Vec<String>,
    },
    #[error("unknown region '{name}'{}", did_you_mean(.suggestions))]
    UnknownRegion {
        name: String,
        suggestions: Vec<String>,
    },
    #[error("invalid filter: {0}")]
    InvalidFilter(String),
}

fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!(" (closest known: {})", suggestions.join(", "))
    }
}

/// Up to `n` names from `known` closest to `name`: same-prefix names first, then by edit
/// distance, case-insensitively.
pub fn suggest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>, n: usize) -> Vec<String> {
    let wanted = name.to_ascii_lowercase();
    let mut scored: Vec<(usize, &str)> = known
        .into_iter()
        .map(|k| {
            let kl = k.to_ascii_lowercase();
            let related = kl.starts_with(&wanted) || wanted.starts_with(&kl);
            let d = strsim::levenshtein(&wanted, &kl);
            (if related { d.min(1) } else { d + 1 }, k)
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    let limit = (wanted.len() / 2).max(3);
    scored
        .into_iter()
        .filter(|(d, _)| *d <= limit)
        .take(n)
        .map(|(_, k)| k.to_owned())
        .collect()
}

/// Filters over offers. Every filter is optional; an empty query matches everything.
#[derive(Debug, Clone, Default)]
pub struct OfferQuery {
    pub accelerator: Option<AcceleratorFilter>,
    pub cloud: Option<Cloud>,
    pub region: Option<String>,
    pub capacity: Option<Capacity>,
    pub min_vcpus: Option<f64>,
    pub min_memory_gib: Option<f64>,
    /// Upper bound on the price of one VM, USD/h.
    pub max_price: Option<f64>,
}

impl OfferQuery {
    /// Check names against the catalog and canonicalise their case, so `a100` finds `A100`
    /// and a typo gets a list of the closest real names instead of an empty result.
    pub fn resolve(mut self, catalog: &Catalog) -> Result<Self, QueryError> {
        for (what, value) in [
            ("min-vcpus", self.min_vcpus),
            ("min-memory", self.min_memory_gib),
            ("max-price", self.max_price),
        ] {
            if let Some(v) = value
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(QueryError::InvalidFilter(format!(
                    "--{what} must be a non-negative number, got {v}"
                )));
            }
        }
        if let Some(filter) = &mut self.accelerator {
            let names = catalog.accelerator_names();
            match names.iter().find(|n| n.eq_ignore_ascii_case(&filter.name)) {
                Some(canonical) => filter.name = (*canonical).to_owned(),
                None => {
                    return Err(QueryError::UnknownAccelerator {
                        suggestions: suggest(&filter.name, names.iter().copied(), 5),
                        name: filter.name.clone(),
                    });
                }
            }
        }
        if let Some(region) = &mut self.region {
            let mut regions: Vec<&str> = catalog.offers.iter().map(|o| o.region.as_str()).collect();
            regions.sort_unstable();
            regions.dedup();
            match regions.iter().find(|r| r.eq_ignore_ascii_case(region)) {
                Some(canonical) => *region = (*canonical).to_owned(),
                None => {
                    return Err(QueryError::UnknownRegion {
                        suggestions: suggest(region, regions.iter().copied(), 5),
                        name: region.clone(),
                    });
                }
            }
        }
        Ok(self)
    }

    pub fn matches(&self, offer: &Offer) -> bool {
        if let Some(filter) = &self.accelerator {
            match offer.accelerator() {
                Some(acc) if acc.name == filter.name => {
                    if filter.count.is_some_and(|c| c != acc.count) {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        self.cloud.is_none_or(|c| c == offer.cloud)
            && self
                .region
                .as_deref()
                .is_none_or(|r| r == offer.region.as_str())
            && self.capacity.is_none_or(|c| c == offer.capacity)
            && self
                .min_vcpus
                .is_none_or(|v| offer.instance_type.vcpus >= v)
            && self
                .min_memory_gib
                .is_none_or(|m| offer.instance_type.memory_gib >= m)
            && self.max_price.is_none_or(|p| offer.price_per_hour <= p)
    }

    /// Matching offers, cheapest first (ties broken by key, so output is stable).
    pub fn select<'c>(&self, catalog: &'c Catalog) -> Vec<&'c Offer> {
        let mut out: Vec<&Offer> = catalog.offers.iter().filter(|o| self.matches(o)).collect();
        out.sort_by(|a, b| {
            a.price_per_hour
                .partial_cmp(&b.price_per_hour)
                .unwrap_or(Ordering::Equal)
                .then_with(|| a.key().cmp(&b.key()))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_accelerator_filters() {
        let f: AcceleratorFilter = "A100:8".parse().unwrap();
        assert_eq!((f.name.as_str(), f.count), ("A100", Some(8)));
        let f: AcceleratorFilter = "tpu-v5p-8".parse().unwrap();
        assert_eq!((f.name.as_str(), f.count), ("tpu-v5p-8", None));
        assert!("A100:0".parse::<AcceleratorFilter>().is_err());
        assert!("A100:x".parse::<AcceleratorFilter>().is_err());
        assert!(":4".parse::<AcceleratorFilter>().is_err());
    }

    #[test]
    fn suggestions_prefer_related_names() {
        let known = ["A100", "A100-80GB", "H100", "T4", "L4", "V100"];
        let s = suggest("A10", known, 3);
        assert_eq!(s[0], "A100");
        assert!(s.contains(&"A100-80GB".to_owned()));
        assert_eq!(suggest("h100", known, 1), vec!["H100"]);
        assert!(suggest("zzzzzzzz", known, 3).is_empty());
    }
}
