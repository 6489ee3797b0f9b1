//! The account's accelerator quotas from AWS Service Quotas.
//!
//! EC2 limits GPU, Inferentia, Trainium and Gaudi instances by vCPUs per bucket of instance
//! classes, on-demand and spot apart (the table is [`tern_cloud::AWS_ACCELERATOR_BUCKETS`]).
//! Each quota is read with `GetServiceQuota`, the value applied to this account; a quota
//! never changed for the account has no applied value there (`NoSuchResourceException`), and
//! then AWS's default is what the account has, from one `ListAWSDefaultServiceQuotas`.
//! A region's reading is reused for [`QUOTA_TTL`]: limits change only when AWS approves an
//! increase, and a launch refused in between names its limit anyway
//! ([`tern_cloud::quota_named`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_servicequotas::Client;
use aws_sdk_servicequotas::config::Region as SdkRegion;
use tern_cloud::{AWS_ACCELERATOR_BUCKETS, Capacity, CloudQuota, ProviderError, Region};

use crate::AwsProvider;
use crate::errors::from_sdk;

/// How long one region's quotas are reused before they are read again.
pub const QUOTA_TTL: Duration = Duration::from_secs(10 * 60);

/// EC2's service code in Service Quotas.
const EC2: &str = "ec2";

/// A Service Quotas client and the last reading per region.
#[derive(Debug)]
pub(crate) struct QuotaReader {
    client: Client,
    cache: Mutex<HashMap<String, (Instant, Vec<CloudQuota>)>>,
}

impl QuotaReader {
    pub(crate) fn new(client: Client) -> Self {
        Self {
            client,
            cache: Mutex::default(),
        }
    }

    /// The client for `region` (Service Quotas answers for the region it is called in).
    fn client(&self, region: &str) -> Client {
        let conf = self
            .client
            .config()
            .to_builder()
            .region(SdkRegion::new(region.to_owned()))
            .build();
        Client::from_conf(conf)
    }

    fn cached(&self, region: &str) -> Option<Vec<CloudQuota>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let (at, quotas) = cache.get(region)?;
        (at.elapsed() < QUOTA_TTL).then(|| quotas.clone())
    }

    /// Every accelerator bucket's on-demand and spot quota in `region`; a quota AWS knows
    /// neither an applied nor a default value of is left out.
    async fn read(&self, region: &Region) -> Result<Vec<CloudQuota>, ProviderError> {
        if let Some(quotas) = self.cached(region.as_str()) {
            return Ok(quotas);
        }
        let client = self.client(region.as_str());
        let mut defaults: Option<HashMap<String, f64>> = None;
        let mut out = Vec::new();
        for bucket in &AWS_ACCELERATOR_BUCKETS {
            for capacity in [Capacity::OnDemand, Capacity::Spot] {
                let code = match capacity {
                    Capacity::Spot => bucket.spot,
                    _ => bucket.on_demand,
                };
                let value = match applied(&client, code).await? {
                    Some(v) => Some(v),
                    None => {
                        if defaults.is_none() {
                            defaults = Some(ec2_defaults(&client).await?);
                        }
                        defaults.as_ref().and_then(|d| d.get(code).copied())
                    }
                };
                if let Some(value) = value {
                    out.push(bucket.quota(region, capacity, whole(value)));
                }
            }
        }
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(region.to_string(), (Instant::now(), out.clone()));
        Ok(out)
    }
}

/// The value applied to this account (`GetServiceQuota`); `None` when AWS has none, which
/// it answers with `NoSuchResourceException` for a quota the account never changed.
async fn applied(client: &Client, code: &str) -> Result<Option<f64>, ProviderError> {
    let answer = client
        .get_service_quota()
        .service_code(EC2)
        .quota_code(code)
        .send()
        .await;
    match answer {
        Ok(out) => Ok(out.quota().and_then(|q| q.value())),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_resource_exception()) =>
        {
            Ok(None)
        }
        Err(e) => Err(from_sdk(e)),
    }
}

/// AWS's default value of every EC2 quota, by code (`ListAWSDefaultServiceQuotas`, every
/// page): one listing serves every quota without an applied value. Listing rather than
/// `GetAWSDefaultServiceQuota` per code also keeps tern on calls moto answers.
async fn ec2_defaults(client: &Client) -> Result<HashMap<String, f64>, ProviderError> {
    let mut out = HashMap::new();
    let mut token: Option<String> = None;
    loop {
        let page = client
            .list_aws_default_service_quotas()
            .service_code(EC2)
            .set_next_token(token.take())
            .send()
            .await;
        let page = match page {
            Ok(page) => page,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_no_such_resource_exception()) =>
            {
                return Ok(out);
            }
            Err(e) => return Err(from_sdk(e)),
        };
        for q in page.quotas() {
            if let (Some(code), Some(value)) = (q.quota_code(), q.value()) {
                out.insert(code.to_owned(), value);
            }
        }
        match page.next_token() {
            Some(t) if !t.is_empty() => token = Some(t.to_owned()),
            _ => return Ok(out),
        }
    }
}

/// Service Quotas sends values as floats (`64.0`); a vCPU count is whole, never negative.
fn whole(v: f64) -> u32 {
    if v.is_finite() && v > 0.0 {
        v.min(f64::from(u32::MAX)).floor() as u32
    } else {
        0
    }
}

/// [`tern_cloud::Provider::quotas`] for AWS: none without a Service Quotas client.
pub(crate) async fn read(
    provider: &AwsProvider,
    region: &Region,
) -> Result<Vec<CloudQuota>, ProviderError> {
    match &provider.quotas {
        Some(reader) => reader.read(region).await,
        None => Ok(Vec::new()),
    }
}

impl AwsProvider {
    /// Read the account's accelerator quotas with this Service Quotas client (built from the
    /// same settings as the EC2 client, so an endpoint override such as moto's applies).
    pub fn with_quotas_client(mut self, client: Client) -> Self {
        self.quotas = Some(QuotaReader::new(client));
        self
    }
}
