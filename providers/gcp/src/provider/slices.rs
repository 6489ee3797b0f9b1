//! TPU slices behind the same [`tern_cloud::Provider`] calls as VMs. A slice is an instance
//! whose id is `ZONE/tpu/NAME` (a node made directly) or `ZONE/qr/NAME` (a queued resource,
//! Queued while it waits for capacity, Running once ACTIVE). A queued resource still waiting
//! is therefore an intent in progress the controller can see, and cancelling it (the plan
//! changed) is a terminate. PREEMPTED nodes and suspended or failed queued resources are
//! deleted when seen, so they stop holding quota, and reported as preemptions.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use google_cloud_tpu_v2::model::{Node, QueuedResource};
use tern_cloud::{
    Capacity, Instance, InstanceId, InstanceState, Interruption, InterruptionKind, LaunchRequest,
    Offer, ProviderError, Tags, tag,
};
use tracing::{info, warn};

use super::{GcpProvider, lock, request_id};
use crate::errors::{from_call, is_already_exists};
use crate::labels;
use crate::tpu::{self, Tpus};

/// What an instance id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target<'a> {
    Vm { zone: &'a str, name: &'a str },
    Node { zone: &'a str, name: &'a str },
    Queued { zone: &'a str, name: &'a str },
}

pub(super) fn target(id: &InstanceId) -> Result<Target<'_>, ProviderError> {
    let parts: Vec<&str> = id.0.split('/').collect();
    match parts.as_slice() {
        [zone, name] => Ok(Target::Vm { zone, name }),
        [zone, "tpu", name] => Ok(Target::Node { zone, name }),
        [zone, "qr", name] => Ok(Target::Queued { zone, name }),
        _ => Err(ProviderError::InvalidRequest {
            message: format!(
                "GCP instance ids are ZONE/NAME, ZONE/tpu/NAME or ZONE/qr/NAME; found {:?}",
                id.0
            ),
        }),
    }
}

fn node_state(node: &Node) -> Option<InstanceState> {
    match node.state.name()? {
        "CREATING" | "STARTING" | "RESTARTING" | "REPAIRING" | "REIMAGING" | "UNHIDING" => {
            Some(InstanceState::Pending)
        }
        "READY" => Some(InstanceState::Running),
        "STOPPING" | "STOPPED" | "DELETING" | "HIDING" | "HIDDEN" => Some(InstanceState::Stopping),
        // PREEMPTED, TERMINATED: gone (and deleted by `slice_interruptions`).
        _ => None,
    }
}

fn queued_state(qr: &QueuedResource) -> Option<InstanceState> {
    let state = qr.state.as_ref()?.state.name()?;
    match state {
        "CREATING" | "ACCEPTED" | "WAITING_FOR_RESOURCES" => Some(InstanceState::Queued),
        "PROVISIONING" => Some(InstanceState::Pending),
        "ACTIVE" => Some(InstanceState::Running),
        // FAILED, SUSPENDING, SUSPENDED, DELETING: gone.
        _ => None,
    }
}

/// The node a queued resource asks for (its labels and type).
fn queued_node(qr: &QueuedResource) -> Option<&Node> {
    let tpu = qr.tpu()?;
    tpu.node_spec.first()?.node.as_ref()
}

fn created_at(t: Option<&google_cloud_wkt::Timestamp>) -> DateTime<Utc> {
    t.and_then(|t| DateTime::from_timestamp(t.seconds(), u32::try_from(t.nanos()).unwrap_or(0)))
        .unwrap_or_else(Utc::now)
}

fn tags_of(node: &Node) -> Tags {
    let label_map: BTreeMap<String, String> = node
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let description = (!node.description.is_empty()).then_some(node.description.as_str());
    labels::to_tags(&label_map, description)
}

impl GcpProvider {
    fn tpus(&self) -> Option<&Tpus> {
        self.tpus.as_ref()
    }

    /// The catalog's TPU offers of `zone` whose slice type the zone sells. The TPU API being
    /// off or unreachable costs the TPU offers, not the VM ones.
    pub(super) async fn tpu_offers(&self, zone: &str) -> Vec<Offer> {
        let Some(tpus) = self.tpus() else {
            return Vec::new();
        };
        let cached = lock(&self.cache).tpu_types.get(zone).cloned();
        let types = match cached {
            Some((at, types)) if at.elapsed() < self.config.shapes_ttl => types,
            _ => match tpus.accelerator_types(zone).await {
                Ok(t) => {
                    lock(&self.cache)
                        .tpu_types
                        .insert(zone.to_owned(), (std::time::Instant::now(), t.clone()));
                    t
                }
                Err(e) => {
                    warn!(%zone, error = %from_call(&e, None), "listing TPU types failed; no TPU offers in this zone for now");
                    cached.map(|c| c.1).unwrap_or_default()
                }
            },
        };
        self.catalog
            .iter()
            .filter(|o| o.zone.0 == zone)
            .filter(|o| {
                tpu::accelerator_type(&o.instance_type.name)
                    .is_some_and(|t| types.iter().any(|x| x == t))
            })
            .cloned()
            .collect()
    }

    /// `count` slices of a TPU offer: nodes for small spot slices, queued resources otherwise.
    pub(super) async fn launch_slices(
        &self,
        request: &LaunchRequest,
        n: usize,
        offer: &Offer,
        count: u32,
    ) -> Result<Vec<Instance>, ProviderError> {
        let tpus = self.tpus().ok_or_else(|| ProviderError::InvalidRequest {
            message: "TPU offers need the TPU API (GcpConfig::tpus)".into(),
        })?;
        let zone = offer.zone.0.as_str();
        let accelerator = tpu::accelerator_type(&offer.instance_type.name).unwrap_or_default();
        let spot = offer.capacity == Capacity::Spot;
        let direct = spot && offer.accelerator_units() <= self.config.tpu_direct_max_chips;
        let prefix = format!(
            "tern-{}-{n}",
            &request.key.as_uuid().simple().to_string()[..16]
        );
        let mut made = Vec::new();
        for i in 0..count {
            let name = format!("{prefix}-{i:04}");
            let mut node = tpu::node(
                accelerator,
                &self.config.tpu_runtime,
                labels::from_tags(&request.tags).into_iter().collect(),
                spot,
            );
            node.description = labels::description(&request.tags);
            if self.config.dry_run {
                info!(call = if direct { "nodes.create" } else { "queuedResources.create" },
                      %zone, node = %name, accelerator, spot, "dry run: not sent");
                continue;
            }
            let result = if direct {
                tpus.create_node(zone, &name, node).await.map(|_| ())
            } else {
                let rid = request_id(&request.key, &format!("{}/{i}", offer.key()));
                tpus.create_queued(zone, &name, &rid, node, spot, self.config.tpu_queue_for)
                    .await
                    .map(|_| ())
            };
            match result {
                Ok(()) => {}
                Err(e) if is_already_exists(&e) => {}
                Err(e) if made.is_empty() => return Err(from_call(&e, Some(&offer.key()))),
                Err(e) => {
                    warn!(%zone, error = %from_call(&e, Some(&offer.key())), made = made.len(), "slice launch stopped part way");
                    break;
                }
            }
            let (kind, state) = if direct {
                ("tpu", InstanceState::Pending)
            } else {
                ("qr", InstanceState::Queued)
            };
            made.push(Instance {
                id: InstanceId::new(format!("{zone}/{kind}/{name}")),
                offer: offer.clone().into(),
                state,
                tags: request.tags.clone().into(),
                launched_at: Utc::now(),
            });
        }
        Ok(made)
    }

    /// The live slices of a zone: direct nodes and queued resources (whose nodes they stand
    /// for), as tern instances.
    pub(super) async fn slices(&self, zone: &str) -> Result<Vec<Instance>, ProviderError> {
        let Some(tpus) = self.tpus() else {
            return Ok(Vec::new());
        };
        let nodes = match tpus.nodes(zone).await.map_err(|e| from_call(&e, None)) {
            Ok(n) => n,
            // The TPU API disabled, or no TPU permission: tern cannot have made slices here.
            Err(e @ ProviderError::Unauthorized { .. }) => {
                warn!(%zone, error = %e, "no access to Cloud TPU; listing VMs only");
                return Ok(Vec::new());
            }
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for node in nodes {
            if !node.queued_resource.is_empty() {
                continue;
            }
            let (Some(state), Some(name)) = (node_state(&node), node.name.rsplit('/').next())
            else {
                continue;
            };
            out.push(self.slice(
                zone,
                "tpu",
                name,
                &node,
                state,
                created_at(node.create_time.as_ref()),
            ));
        }
        for qr in tpus.queued(zone).await.map_err(|e| from_call(&e, None))? {
            let (Some(state), Some(node), Some(name)) = (
                queued_state(&qr),
                queued_node(&qr),
                qr.name.rsplit('/').next(),
            ) else {
                continue;
            };
            out.push(self.slice(
                zone,
                "qr",
                name,
                node,
                state,
                created_at(qr.create_time.as_ref()),
            ));
        }
        Ok(out)
    }

    fn slice(
        &self,
        zone: &str,
        kind: &str,
        name: &str,
        node: &Node,
        state: InstanceState,
        launched_at: DateTime<Utc>,
    ) -> Instance {
        let spot = node
            .scheduling_config
            .as_ref()
            .is_some_and(|s| s.spot || s.preemptible);
        let capacity = if spot {
            Capacity::Spot
        } else {
            Capacity::OnDemand
        };
        let type_name = format!("tpu-{}", node.accelerator_type);
        Instance {
            id: InstanceId::new(format!("{zone}/{kind}/{name}")),
            offer: self.offer_for(zone, &type_name, capacity, None).into(),
            state,
            tags: tags_of(node).into(),
            launched_at,
        }
    }

    /// Whether labels carry this controller's owner (any owner label when none is set): the
    /// check every delete, VM or slice, makes first.
    pub(super) fn owns_labels(
        &self,
        labels_of: &std::collections::HashMap<String, String>,
    ) -> bool {
        let owner = labels::key(tag::OWNER);
        match &self.config.owner {
            Some(o) => labels_of.get(&owner) == Some(&labels::value(o)),
            None => labels_of.contains_key(&owner),
        }
    }

    /// Preempted nodes and suspended or failed queued resources of ours in `zone`: each is
    /// deleted (it would hold quota) and reported once as a preemption.
    pub(super) async fn slice_interruptions(
        &self,
        zone: &str,
    ) -> Result<Vec<Interruption>, ProviderError> {
        let Some(tpus) = self.tpus() else {
            return Ok(Vec::new());
        };
        let now = Utc::now();
        let mut gone: Vec<InstanceId> = Vec::new();
        let nodes = match tpus.nodes(zone).await.map_err(|e| from_call(&e, None)) {
            Ok(n) => n,
            Err(ProviderError::Unauthorized { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        for node in nodes {
            let preempted = matches!(node.state.name(), Some("PREEMPTED" | "TERMINATED"));
            if preempted && node.queued_resource.is_empty() && self.owns_labels(&node.labels) {
                let name = node.name.rsplit('/').next().unwrap_or_default().to_owned();
                gone.push(InstanceId::new(format!("{zone}/tpu/{name}")));
            }
        }
        for qr in tpus.queued(zone).await.map_err(|e| from_call(&e, None))? {
            let state = qr.state.as_ref().and_then(|s| s.state.name());
            let ended = matches!(state, Some("SUSPENDING" | "SUSPENDED" | "FAILED"));
            if ended && queued_node(&qr).is_some_and(|n| self.owns_labels(&n.labels)) {
                let name = qr.name.rsplit('/').next().unwrap_or_default().to_owned();
                gone.push(InstanceId::new(format!("{zone}/qr/{name}")));
            }
        }
        let mut found = Vec::new();
        for id in gone {
            if !lock(&self.seen_preemptions).insert(id.to_string()) {
                continue;
            }
            if let Err(e) = self.delete_slice(&id).await {
                warn!(instance = %id, error = %e, "could not delete a preempted slice; it still holds quota");
                lock(&self.seen_preemptions).remove(id.as_str());
                continue;
            }
            found.push(Interruption {
                instance: id,
                kind: InterruptionKind::Preempted,
                deadline: None,
                received_at: now,
            });
        }
        Ok(found)
    }

    /// Delete a node or a queued resource (with its node). Gone already counts as done.
    pub(super) async fn delete_slice(&self, id: &InstanceId) -> Result<(), ProviderError> {
        let Some(tpus) = self.tpus() else {
            return Ok(());
        };
        if self.config.dry_run {
            info!(call = "tpu delete", instance = %id, "dry run: not sent");
            return Ok(());
        }
        let result = match target(id)? {
            Target::Node { zone, name } => tpus.delete_node(zone, name).await,
            Target::Queued { zone, name } => {
                let rid = tern_cloud::IdempotencyKey::for_name(&format!("delete/{}", id.0))
                    .gce_request_id();
                tpus.delete_queued(zone, name, &rid).await
            }
            Target::Vm { .. } => return Ok(()),
        };
        match result {
            Ok(()) => Ok(()),
            Err(e) => {
                let err = from_call(&e, None);
                if err.is_not_found() { Ok(()) } else { Err(err) }
            }
        }
    }

    /// The labels of the node or queued resource an id names, in any state; `None` if it does
    /// not exist.
    async fn slice_labels(
        &self,
        id: &InstanceId,
    ) -> Result<Option<std::collections::HashMap<String, String>>, ProviderError> {
        let Some(tpus) = self.tpus() else {
            return Ok(None);
        };
        let last = |n: &str| n.rsplit('/').next().map(str::to_owned);
        Ok(match target(id)? {
            Target::Node { zone, name } => tpus
                .nodes(zone)
                .await
                .map_err(|e| from_call(&e, None))?
                .into_iter()
                .find(|n| last(&n.name).as_deref() == Some(name))
                .map(|n| n.labels),
            Target::Queued { zone, name } => tpus
                .queued(zone)
                .await
                .map_err(|e| from_call(&e, None))?
                .iter()
                .find(|q| last(&q.name).as_deref() == Some(name))
                .map(|q| queued_node(q).map(|n| n.labels.clone()).unwrap_or_default()),
            Target::Vm { .. } => None,
        })
    }

    /// Terminate a slice of ours, in whatever state: the owner label is checked on the node
    /// (or the queued resource's node spec) first. A slice that no longer exists is done.
    pub(super) async fn terminate_slice(&self, id: &InstanceId) -> Result<(), ProviderError> {
        let Some(found) = self.slice_labels(id).await? else {
            return Ok(());
        };
        if !self.owns_labels(&found) {
            return Err(ProviderError::InvalidRequest {
                message: format!(
                    "slice {id} does not carry this controller's {} label; tern deletes only its \
                     own instances",
                    labels::key(tag::OWNER)
                ),
            });
        }
        self.delete_slice(id).await
    }
}
