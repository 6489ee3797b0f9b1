//! Where a job may run: the placement constraints of a job spec, and the one check every
//! place that picks capacity for the job applies (the planner's candidates, the controller's
//! launches, replacements, fallbacks and moves).

use serde::{Deserialize, Serialize};

use crate::{Capacity, Cloud, InstanceType, Offer};

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

/// One pool of capacity a constraint check looks at: a shape's capacity type in a zone, at a
/// price.
#[derive(Debug, Clone, Copy)]
pub struct Pool<'a> {
    pub cloud: Cloud,
    pub region: &'a str,
    pub zone: &'a str,
    pub shape: &'a InstanceType,
    pub capacity: Capacity,
    pub price: f64,
}

/// Where the job's training data lives: reading it from another region pays egress on every
/// start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataLocation {
    pub region: String,
    pub size_gb: f64,
}

/// A quantity a VM shape must have: at least `value`, or exactly it (SkyPilot's `4+` and `4`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Amount {
    pub value: f64,
    pub at_least: bool,
}

impl Amount {
    pub fn admits(self, x: f64) -> bool {
        if self.at_least {
            x >= self.value - 1e-9
        } else {
            (x - self.value).abs() < 1e-6
        }
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.value, if self.at_least { "+" } else { "" })
    }
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
    /// Instance type globs (`p3.*`, `a2-highgpu-8g`) the job may run on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<String>,
    /// vCPUs per VM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Amount>,
    /// Memory per VM, GiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<Amount>,
    /// Accelerators per VM, exactly (a SkyPilot task's `V100:4`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    /// Accelerator names: set in an `any_of` entry only (the job's own list is
    /// `JobSpec::accelerators`, which every entry's must come from).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub accelerators: Vec<String>,
    /// Alternatives: where these constraints allow and so does at least one entry (a SkyPilot
    /// task's `any_of` and `ordered`). Entries hold no `any_of` of their own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub any_of: Vec<Constraints>,
}

impl Constraints {
    /// Whether the job may run on `offer`.
    pub fn allows(&self, offer: &Offer) -> bool {
        self.allows_pool(&Pool {
            cloud: offer.cloud,
            region: offer.region.as_str(),
            zone: offer.zone.as_str(),
            shape: &offer.instance_type,
            capacity: offer.capacity,
            price: offer.price_per_hour,
        })
    }

    /// Whether the job may run on `pool`: these constraints and, when there are alternatives,
    /// at least one of them.
    pub fn allows_pool(&self, pool: &Pool<'_>) -> bool {
        self.allows_one(pool)
            && (self.any_of.is_empty() || self.any_of.iter().any(|a| a.allows_one(pool)))
    }

    /// These constraints alone, not their alternatives.
    fn allows_one(&self, p: &Pool<'_>) -> bool {
        let any = |globs: &[String], text: &str| globs.iter().any(|g| glob(g, text));
        let shape = &p.shape.name;
        // The simulated cloud stands in for both: a spec written for AWS runs on it too.
        (self.clouds.is_empty() || self.clouds.contains(&p.cloud) || p.cloud == Cloud::Sim)
            && (self.regions.is_empty() || any(&self.regions, p.region))
            && (self.zones.is_empty() || any(&self.zones, p.zone))
            && !self
                .exclude
                .iter()
                .any(|g| glob(g, p.region) || glob(g, p.zone) || glob(g, shape))
            && self.max_price_per_hour.is_none_or(|max| p.price <= max)
            && self.capacity.allows(p.capacity)
            && self.allows_shape(p.shape)
    }

    /// The per-VM rules: instance type, vCPUs, memory, accelerator and how many.
    fn allows_shape(&self, shape: &InstanceType) -> bool {
        let acc = shape.accelerator.as_ref();
        (self.instance_types.is_empty() || self.instance_types.iter().any(|g| glob(g, &shape.name)))
            && self.cpus.is_none_or(|a| a.admits(shape.vcpus))
            && self.memory_gib.is_none_or(|a| a.admits(shape.memory_gib))
            && self
                .gpus_per_node
                .is_none_or(|n| acc.is_some_and(|a| a.count == n))
            && (self.accelerators.is_empty()
                || acc.is_some_and(|a| {
                    self.accelerators
                        .iter()
                        .any(|name| name.eq_ignore_ascii_case(&a.name))
                }))
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
    fn shape_rules_and_alternatives_rule_offers_out() {
        let v100 = |count: u32, capacity| {
            crate::testkit::offer("p3.8xlarge", "use1-az1", capacity)
                .cloud(Cloud::Aws)
                .region("us-east-1")
                .gpus("V100", count)
                .build()
        };
        let o = v100(4, Capacity::Spot);
        let (cpus, mem) = (o.instance_type.vcpus, o.instance_type.memory_gib);
        let c = |f: &dyn Fn(&mut Constraints)| {
            let mut c = Constraints::default();
            f(&mut c);
            c.allows(&o)
        };
        let at_least = |value| {
            Some(Amount {
                value,
                at_least: true,
            })
        };
        let exactly = |value| {
            Some(Amount {
                value,
                at_least: false,
            })
        };
        assert!(c(&|c| c.instance_types = vec!["p3.*".into()]));
        assert!(!c(&|c| c.instance_types = vec!["p4d.*".into()]));
        assert!(c(&|c| c.cpus = at_least(cpus)));
        assert!(!c(&|c| c.cpus = at_least(cpus + 1.0)));
        assert!(c(&|c| c.cpus = exactly(cpus)));
        assert!(!c(&|c| c.cpus = exactly(cpus - 1.0)));
        assert!(c(&|c| c.memory_gib = at_least(mem)));
        assert!(!c(&|c| c.memory_gib = exactly(mem * 2.0)));
        assert!(c(&|c| c.gpus_per_node = Some(4)));
        assert!(!c(&|c| c.gpus_per_node = Some(8)));
        assert!(c(&|c| c.accelerators = vec!["v100".into()]));
        assert!(!c(&|c| c.accelerators = vec!["A100".into()]));
        // Alternatives: one must allow, on top of the rest.
        let alt = |f: &dyn Fn(&mut Constraints)| {
            let mut a = Constraints::default();
            f(&mut a);
            a
        };
        let spot = alt(&|a| a.capacity = CapacityRule::SpotOnly);
        let gcp = alt(&|a| a.clouds = vec![Cloud::Gcp]);
        assert!(c(&|c| c.any_of = vec![gcp.clone(), spot.clone()]));
        assert!(!c(&|c| c.any_of = vec![gcp.clone()]));
        assert!(!c(&|c| {
            c.any_of = vec![spot.clone()];
            c.regions = vec!["eu-*".into()];
        }));
        let on_demand = v100(4, Capacity::OnDemand);
        let only_spot = Constraints {
            any_of: vec![spot, gcp],
            ..Constraints::default()
        };
        assert!(!only_spot.allows(&on_demand));
        assert_eq!(
            Amount {
                value: 8.0,
                at_least: true
            }
            .to_string(),
            "8+"
        );
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
