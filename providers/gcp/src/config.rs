use std::time::Duration;

/// Where and how the GCP provider works. Credentials are never here: they come from
/// Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's ADC file, the
/// metadata server, workload identity).
#[derive(Debug, Clone)]
pub struct GcpConfig {
    pub project: String,
    /// Home region: offers, launches and listings.
    pub region: String,
    /// Zones to use; empty means every zone of `region` that is UP.
    pub zones: Vec<String>,
    /// Send every Compute call here instead of `https://compute.googleapis.com` (a fake).
    pub endpoint: Option<String>,
    /// Send Cloud Billing Catalog calls here instead of `https://cloudbilling.googleapis.com`.
    pub billing_endpoint: Option<String>,
    /// Price offers from the Cloud Billing Catalog (else from the bundled catalog only).
    pub live_prices: bool,
    /// How long Billing Catalog prices are reused; a failed refresh is retried after a tenth.
    pub prices_ttl: Duration,
    /// Send Cloud TPU calls here instead of `https://tpu.googleapis.com`.
    pub tpu_endpoint: Option<String>,
    /// Offer and launch TPU slices (needs the Cloud TPU API enabled in the project).
    pub tpus: bool,
    /// TPU VM software version of the slices tern creates.
    pub tpu_runtime: String,
    /// Spot slices with at most this many chips are created directly as nodes; larger or
    /// on-demand slices go through queued resources.
    pub tpu_direct_max_chips: u32,
    /// How long a queued resource waits for capacity before GCP drops it.
    pub tpu_queue_for: Duration,
    /// No credentials at all: only for a local fake.
    pub anonymous: bool,
    /// The workers' service account (email); none means the template's or the project default.
    pub service_account: Option<String>,
    /// An instance template (`global/instanceTemplates/NAME` or a full URL) the workers start
    /// from: image, network, startup script running `tern agent`.
    pub instance_template: Option<String>,
    /// Boot image when there is no template.
    pub image: String,
    /// Boot disk size when there is no template.
    pub disk_size_gb: i64,
    /// VPC network when there is no template.
    pub network: String,
    /// Log every mutating call (insert, bulkInsert, delete) and make none.
    pub dry_run: bool,
    /// The owner label launches carry (and terminations require).
    pub owner: Option<String>,
    /// Offer only these machine types (empty: every type with accelerators).
    pub machine_types: Vec<String>,
    /// How long zones, machine types and accelerator types are reused before a refresh.
    pub shapes_ttl: Duration,
    /// How long an offer that hit a stockout is flagged unavailable.
    pub capacity_memory: Duration,
    /// First delay between polls of a long-running operation (it doubles up to 10 s).
    pub poll_interval: Duration,
    /// Times a rate-limited insert is resent (with the same requestId) before giving up.
    pub throttle_retries: u32,
}

impl GcpConfig {
    pub fn new(project: impl Into<String>, region: impl Into<String>) -> Self {
        Self {
            project: project.into(),
            region: region.into(),
            zones: Vec::new(),
            endpoint: None,
            billing_endpoint: None,
            live_prices: true,
            prices_ttl: Duration::from_secs(3600),
            tpu_endpoint: None,
            tpus: true,
            tpu_runtime: "v2-alpha-tpuv5".into(),
            tpu_direct_max_chips: 8,
            tpu_queue_for: Duration::from_secs(3600),
            anonymous: false,
            service_account: None,
            instance_template: None,
            image: "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570".into(),
            disk_size_gb: 200,
            network: "global/networks/default".into(),
            dry_run: false,
            owner: None,
            machine_types: Vec::new(),
            shapes_ttl: Duration::from_secs(3600),
            capacity_memory: Duration::from_secs(600),
            poll_interval: Duration::from_secs(1),
            throttle_retries: 4,
        }
    }
}
