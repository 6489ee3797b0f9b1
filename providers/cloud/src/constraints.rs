//! Where a job may run: the placement constraints of a job spec, and the one check every
//! place that picks capacity for the job applies (the planner's candidates, the controller's
//! launches, replacements, fallbacks and moves).

use serde::{Deserialize, Serialize};

use crate::{Capacity, Cloud, Offer};

/// Which capacity types a job accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityRule {
    #[default]
    Any,
    SpotOnly,
    OnDemandOnly,
}

impl CapacityRule {
    pub const ALL: [CapacityRule; 3] = [
        CapacityRule::Any,
        CapacityRule::SpotOnly,
        CapacityRule::OnDemandOnly,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CapacityRule::Any => "any",
            CapacityRule::SpotOnly => "spot-only",
            CapacityRule::OnDemandOnly => "on-demand-only",
        }
    }

    pub fn allows(self, c: Capacity) -> bool {
        match self {
            CapacityRule::Any => true,
            CapacityRule::SpotOnly => c.is_preemptible(),
            CapacityRule::OnDemandOnly => !c.is_preemptible(),
        }
    }
}

/// Where the job's training data lives: reading it from another region pays egress on every
/// start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataLocation {
    pub region: String,
    pub size_gb: f64,
}

/// A job's placement constraints. Empty lists allow everything; `exclude` removes regions,
/// zones or instance types matching any of its globs (`*` any run of characters, `?` one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Constraints {
    pub clouds: Vec<Cloud>,
    /// Region globs (`us-*`, `europe-west4`).
    pub regions: Vec<String>,
    /// Zone globs, matched against tern's zone names (AWS AZ ids such as `use1-az4`, GCP zones).
    pub zones: Vec<String>,
    pub exclude: Vec<String>,
    pub data: Option<DataLocation>,
    pub max_price_per_hour: Option<f64>,
    pub capacity: CapacityRule,
}

impl Constraints {
    /// Whether the job may run on `offer`.
    pub fn allows(&self, offer: &Offer) -> bool {
        (self.clouds.is_empty() || self.clouds.contains(&offer.cloud))
            && self.allows_pool(
                offer.region.as_str(),
                offer.zone.as_str(),
                &offer.instance_type.name,
                offer.capacity,
                offer.price_per_hour,
            )
    }

    /// Whether the job may run on `capacity` of `shape` in `zone` of `region` at `price` $/h
    /// (every constraint but the cloud's).
    pub fn allows_pool(
        &self,
        region: &str,
        zone: &str,
        shape: &str,
        capacity: Capacity,
        price: f64,
    ) -> bool {
        let any = |globs: &[String], text: &str| globs.iter().any(|g| glob(g, text));
        (self.regions.is_empty() || any(&self.regions, region))
            && (self.zones.is_empty() || any(&self.zones, zone))
            && !self
                .exclude
                .iter()
                .any(|g| glob(g, region) || glob(g, zone) || glob(g, shape))
            && self.max_price_per_hour.is_none_or(|max| price <= max)
            && self.capacity.allows(capacity)
    }

    /// Dollars to read the job's data once from `region`: nothing in the data's own region.
    pub fn data_egress(&self, region: &str, dollars_per_gb: f64) -> f64 {
        match &self.data {
            Some(d) if d.region != region => d.size_gb * dollars_per_gb,
            _ => 0.0,
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Constraints::default()
    }
}

/// `*` matches any run of characters, `?` one; everything else itself. Case-insensitive.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.to_ascii_lowercase().chars().collect();
    let t: Vec<char> = text.to_ascii_lowercase().chars().collect();
    // Classic two-pointer match with backtracking to the last `*`.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn offer(cloud: Cloud, region: &str, zone: &str, shape: &str, capacity: Capacity) -> Offer {
        crate::testkit::offer(shape, zone, capacity)
            .cloud(cloud)
            .region(region)
            .price(3.0)
            .cpu_only()
            .build()
    }

    #[test]
    fn globs_match_like_shell_patterns() {
        assert!(glob("us-*", "us-east-1"));
        assert!(glob("p3.*", "p3.2xlarge"));
        assert!(glob("*-west?", "europe-west4"));
        assert!(glob("AP-*", "ap-south-1"));
        assert!(!glob("us-*", "eu-west-1"));
        assert!(!glob("p3.*", "p4d.24xlarge"));
        assert!(glob("*", ""));
        assert!(!glob("a*b", "acbc"));
        assert!(glob("a*b*c", "axxbyyc"));
    }

    #[test]
    fn each_constraint_rules_offers_out() {
        let o = offer(
            Cloud::Aws,
            "ap-south-1",
            "aps1-az1",
            "p4d.24xlarge",
            Capacity::Spot,
        );
        assert!(Constraints::default().allows(&o));
        let c = |f: &dyn Fn(&mut Constraints)| {
            let mut c = Constraints::default();
            f(&mut c);
            c.allows(&o)
        };
        assert!(!c(&|c| c.clouds = vec![Cloud::Gcp]));
        assert!(c(&|c| c.clouds = vec![Cloud::Gcp, Cloud::Aws]));
        assert!(!c(&|c| c.regions = vec!["us-*".into()]));
        assert!(c(&|c| c.regions = vec!["us-*".into(), "ap-south-1".into()]));
        assert!(!c(&|c| c.zones = vec!["use1-*".into()]));
        assert!(!c(&|c| c.exclude = vec!["ap-*".into()]));
        assert!(!c(&|c| c.exclude = vec!["p4d.*".into()]));
        assert!(!c(&|c| c.exclude = vec!["aps1-az1".into()]));
        assert!(!c(&|c| c.max_price_per_hour = Some(2.5)));
        assert!(c(&|c| c.max_price_per_hour = Some(3.0)));
        assert!(!c(&|c| c.capacity = CapacityRule::OnDemandOnly));
        assert!(c(&|c| c.capacity = CapacityRule::SpotOnly));
    }

    #[test]
    fn data_elsewhere_pays_egress() {
        let c = Constraints {
            data: Some(DataLocation {
                region: "us-east-1".into(),
                size_gb: 800.0,
            }),
            ..Constraints::default()
        };
        assert_eq!(c.data_egress("us-east-1", 0.02), 0.0);
        assert!((c.data_egress("ap-south-1", 0.02) - 16.0).abs() < 1e-12);
    }

    proptest! {
        /// A pattern without wildcards matches exactly itself (ignoring case), and `*` alone
        /// matches everything.
        #[test]
        fn literal_patterns_match_only_themselves(a in "[a-z0-9.-]{0,12}", b in "[a-z0-9.-]{0,12}") {
            prop_assert_eq!(glob(&a, &b), a == b);
            prop_assert!(glob("*", &b));
            let prefix = format!("{a}*");
            let text = format!("{a}{b}");
            prop_assert!(glob(&prefix, &text));
        }
    }
}
