use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{IntentId, Offer, tag};

/// The cloud's instance id (`i-0abc…`, a GCE instance name, a TPU node name). Shared, not
/// owned: a pass lists and matches the whole fleet (100,000 instances at scale), and a clone
/// is a count, not a copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InstanceId(pub std::sync::Arc<str>);

impl InstanceId {
    pub fn new(id: impl Into<std::sync::Arc<str>>) -> InstanceId {
        InstanceId(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for InstanceId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for InstanceId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for InstanceId {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}

impl From<String> for InstanceId {
    fn from(s: String) -> Self {
        Self(s.into())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    /// Waiting in the cloud's own queue for capacity (a GCP TPU queued resource): not running
    /// yet, bounded by the request's own validity rather than tern's launch timeout.
    Queued,
    Pending,
    Running,
    /// Shutting down or stopping; still billed on some clouds.
    Stopping,
    Terminated,
}

/// Key/value tags as the cloud stores them. Ordered so requests are deterministic.
pub type Tags = BTreeMap<String, String>;

/// A VM tern launched (or found with tern's tags).
///
/// The offer and tags are shared, not owned: a fleet's instances share a handful of offers
/// and tag sets, and a controller lists every instance on every pass (100,000 at fleet
/// scale), so a clone is an id and two reference counts instead of a dozen allocations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub id: InstanceId,
    pub offer: Arc<Offer>,
    pub state: InstanceState,
    pub tags: Arc<Tags>,
    pub launched_at: DateTime<Utc>,
}

impl Instance {
    /// The owner tag (`tern:owner`); instances without it are not tern's to touch.
    pub fn owner(&self) -> Option<&str> {
        self.tags.get(tag::OWNER).map(String::as_str)
    }

    /// The intent that launched this instance, if the tag is present and well formed.
    pub fn intent_id(&self) -> Option<IntentId> {
        self.tags.get(tag::INTENT).and_then(|s| s.parse().ok())
    }

    /// The state store (cluster) whose controller launched this instance.
    pub fn cluster(&self) -> Option<&str> {
        self.tags.get(tag::CLUSTER).map(String::as_str)
    }

    pub fn job(&self) -> Option<&str> {
        self.tags.get(tag::JOB).map(String::as_str)
    }
}

/// Why the cloud is taking (or may take) an instance away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InterruptionKind {
    /// AWS spot interruption warning (2 minutes); GCP preemption (30 s soft-off).
    SpotNotice,
    /// AWS rebalance recommendation: elevated risk, no deadline yet.
    Rebalance,
    /// Already gone.
    Preempted,
    /// Scheduled maintenance or host retirement.
    Maintenance,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interruption {
    pub instance: InstanceId,
    pub kind: InterruptionKind,
    /// When the instance will be stopped, if the cloud said.
    pub deadline: Option<DateTime<Utc>>,
    pub received_at: DateTime<Utc>,
}
