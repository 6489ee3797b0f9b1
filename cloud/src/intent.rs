use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{InstanceId, Offer};

/// Identifies a persisted intent. Random when created, then stored before any cloud call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IntentId(pub Uuid);

impl IntentId {
    pub fn from_uuid(id: Uuid) -> Self {
        Self(id)
    }
}

impl fmt::Display for IntentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for IntentId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(Self)
    }
}

/// The idempotency key of one launch attempt, derived only from persisted data (the intent id
/// and its attempt number), so a controller that crashes after calling the cloud and retries
/// after restart sends the *same* key and the cloud returns the first result instead of
/// launching twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(Uuid);

/// Namespace for tern's name-based (v5) UUIDs, so keys never collide with other tools' UUIDs.
const KEY_NAMESPACE: Uuid = Uuid::from_u128(0x7465_726e_2d69_6465_6d70_6f74_656e_6379);

impl IdempotencyKey {
    pub fn derive(intent: IntentId, attempt: u32) -> Self {
        let name = format!("{}/{attempt}", intent.0);
        Self(Uuid::new_v5(&KEY_NAMESPACE, name.as_bytes()))
    }

    /// A key for one part of this launch (one offer tried, one call of several), stable
    /// across retries of the same intent.
    pub fn part(&self, part: &str) -> Self {
        Self(Uuid::new_v5(&self.0, part.as_bytes()))
    }

    /// A key for a call that has no intent but must not repeat (a delete of one instance).
    pub fn for_name(name: &str) -> Self {
        Self(Uuid::new_v5(&KEY_NAMESPACE, name.as_bytes()))
    }

    /// AWS `ClientToken`: at most 64 printable ASCII characters.
    pub fn aws_client_token(&self) -> String {
        format!("tern-{}", self.0.simple())
    }

    /// GCE `requestId`: a UUID (the zero UUID is not allowed, which v5 never yields).
    pub fn gce_request_id(&self) -> String {
        self.0.hyphenated().to_string()
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What the controller means to do. Persisted **before** the cloud is called.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum IntentKind {
    /// Start `count` instances from the first offer (in order) that has capacity.
    Launch {
        offers: Vec<Offer>,
        count: u32,
    },
    Terminate {
        instances: Vec<InstanceId>,
    },
    /// Checkpoint, bring up the new capacity, restore there, release the old.
    Migrate {
        from: Vec<InstanceId>,
        to: Vec<Offer>,
        count: u32,
    },
    /// Grow or shrink an elastic job to `count` workers.
    Resize {
        count: u32,
    },
}

impl IntentKind {
    pub fn name(&self) -> &'static str {
        match self {
            IntentKind::Launch { .. } => "launch",
            IntentKind::Terminate { .. } => "terminate",
            IntentKind::Migrate { .. } => "migrate",
            IntentKind::Resize { .. } => "resize",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IntentState {
    /// Persisted, not yet sent to the cloud (or sent, and the outcome not yet recorded).
    Pending,
    Done,
    Failed,
    /// Superseded by a newer plan before it was carried out.
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    pub id: IntentId,
    pub job: String,
    pub kind: IntentKind,
    pub state: IntentState,
    /// Incremented (and persisted) before each new launch attempt with a different request.
    pub attempt: u32,
    pub created_at: DateTime<Utc>,
}

impl Intent {
    pub fn idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey::derive(self.id, self.attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn keys_are_stable_and_fit_both_clouds(raw in any::<u128>(), attempt in 0u32..1000) {
            let id = IntentId(Uuid::from_u128(raw));
            let a = IdempotencyKey::derive(id, attempt);
            prop_assert_eq!(a, IdempotencyKey::derive(id, attempt));
            prop_assert_ne!(a, IdempotencyKey::derive(id, attempt + 1));
            let token = a.aws_client_token();
            prop_assert!(token.len() <= 64 && token.is_ascii());
            let rid = a.gce_request_id();
            prop_assert!(Uuid::parse_str(&rid).is_ok());
            prop_assert_ne!(Uuid::parse_str(&rid).unwrap_or_default(), Uuid::nil());
        }
    }
}
