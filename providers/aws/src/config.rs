use std::collections::BTreeMap;
use std::time::Duration;

/// How to reach AWS and how tern behaves there. Credentials are not part of it: they come from
/// the standard chain (environment, profile, SSO, web identity, instance role).
#[derive(Debug, Clone, PartialEq)]
pub struct AwsConfig {
    /// The home region: offers, launches and the SQS queue live here unless an offer says
    /// otherwise.
    pub region: String,
    /// Further regions whose instances `list` and `terminate` also look at.
    pub extra_regions: Vec<String>,
    /// Send every call here instead of AWS (moto, LocalStack).
    pub endpoint_url: Option<String>,
    /// A named profile from `~/.aws/config`; `None` uses the default chain.
    pub profile: Option<String>,
    /// The SQS queue an EventBridge rule feeds with interruption events.
    pub queue_url: Option<String>,
    /// Log every mutating call (CreateFleet, TerminateInstances, DeleteMessageBatch) with its
    /// parameters instead of making it.
    pub dry_run: bool,
    /// Only instances whose `tern:owner` tag has this value may be terminated. `None` accepts
    /// any `tern:owner` value; an instance without the tag is never terminated.
    pub owner: Option<String>,
    /// Launch template (name, or `lt-…` id) for requests that do not name one.
    pub launch_template: Option<String>,
    /// Launch template version; `$Default` unless set.
    pub launch_template_version: String,
    /// Subnet to launch into per AZ id (`use1-az4` → `subnet-…`). Zones without an entry are
    /// launched by AZ name into the default VPC's default subnet.
    pub subnets: BTreeMap<String, String>,
    /// Instance types to offer. Empty: every type with GPUs or Neuron accelerators.
    pub instance_types: Vec<String>,
    /// How long instance types, zone offerings and AZ ids are reused before a refresh.
    pub shapes_ttl: Duration,
    /// How long spot prices are reused before a refresh.
    pub prices_ttl: Duration,
    /// How long an offer that hit a capacity error is reported unavailable.
    pub capacity_memory: Duration,
    /// Refresh on-demand prices from the AWS Pricing API (`pricing:GetProducts`, served from
    /// us-east-1). Off, or when the API fails, on-demand prices come from the bundled catalog
    /// (or the last good refresh).
    pub pricing_api: bool,
    /// How long on-demand prices from the Pricing API are reused before a refresh. A failed
    /// refresh is retried after this or an hour, whichever is shorter.
    pub on_demand_ttl: Duration,
}

impl Default for AwsConfig {
    fn default() -> Self {
        Self {
            region: "us-east-1".into(),
            extra_regions: Vec::new(),
            endpoint_url: None,
            profile: None,
            queue_url: None,
            dry_run: false,
            owner: None,
            launch_template: None,
            launch_template_version: "$Default".into(),
            subnets: BTreeMap::new(),
            instance_types: Vec::new(),
            shapes_ttl: Duration::from_secs(6 * 3600),
            prices_ttl: Duration::from_secs(5 * 60),
            capacity_memory: Duration::from_secs(3 * 60),
            pricing_api: true,
            on_demand_ttl: Duration::from_secs(24 * 3600),
        }
    }
}

impl AwsConfig {
    pub fn new(region: impl Into<String>) -> Self {
        Self {
            region: region.into(),
            ..Self::default()
        }
    }

    /// The home region first, then the extra ones, without repeats.
    pub fn regions(&self) -> Vec<String> {
        let mut out = vec![self.region.clone()];
        for r in &self.extra_regions {
            if !out.contains(r) {
                out.push(r.clone());
            }
        }
        out
    }
}
