//! Cloud TPU VMs (`tpu.googleapis.com/v2`) on google-cloud-rust: small spot slices created
//! directly as nodes, everything else through queued resources, which wait for capacity until
//! their `validUntilDuration`. One function per call; errors are returned raw.

use std::collections::HashMap;
use std::time::Duration;

use google_cloud_lro::Poller;
use google_cloud_tpu_v2::client::Tpu;
use google_cloud_tpu_v2::model::queued_resource::{
    Guaranteed, QueueingPolicy, Spot, Tpu as QrTpu, tpu::NodeSpec,
};
use google_cloud_tpu_v2::model::{Node, QueuedResource, SchedulingConfig};
use tern_cloud::ProviderError;

use crate::GcpConfig;

type Result<T> = std::result::Result<T, google_cloud_tpu_v2::Error>;

/// The TPU client of one project.
#[derive(Debug)]
pub struct Tpus {
    project: String,
    client: Tpu,
}

/// A slice name as the catalog spells it (`tpu-v5p-8`) → the API's accelerator type (`v5p-8`).
pub fn accelerator_type(offer_type: &str) -> Option<&str> {
    offer_type.strip_prefix("tpu-")
}

/// The node a slice launch asks for: type, runtime, labels, spot or not.
pub fn node(accelerator: &str, runtime: &str, labels: HashMap<String, String>, spot: bool) -> Node {
    let mut n = Node::default();
    n.accelerator_type = accelerator.to_owned();
    n.runtime_version = runtime.to_owned();
    n.labels = labels;
    let mut s = SchedulingConfig::default();
    s.spot = spot;
    n.scheduling_config = Some(s);
    n
}

impl Tpus {
    pub async fn connect(config: &GcpConfig) -> std::result::Result<Self, ProviderError> {
        Ok(Self {
            project: config.project.clone(),
            client: client!(Tpu, config, &config.tpu_endpoint),
        })
    }

    fn parent(&self, zone: &str) -> String {
        format!("projects/{}/locations/{zone}", self.project)
    }

    /// Slice types a zone sells (`v5p-8`, …).
    pub async fn accelerator_types(&self, zone: &str) -> Result<Vec<String>> {
        let types = every_page!(
            self.client
                .list_accelerator_types()
                .set_parent(self.parent(zone)),
            accelerator_types
        );
        Ok(types
            .into_iter()
            .filter_map(|a| a.name.rsplit('/').next().map(str::to_owned))
            .collect())
    }

    /// `nodes.create`, polled to done. The node id is the request's guard: a second create of
    /// the same id fails with ALREADY_EXISTS.
    pub async fn create_node(&self, zone: &str, id: &str, node: Node) -> Result<Node> {
        self.client
            .create_node()
            .set_parent(self.parent(zone))
            .set_node_id(id)
            .set_node(node)
            .poller()
            .until_done()
            .await
    }

    /// `queuedResources.create`, polled until the request is accepted (not until it is
    /// provisioned: that can take until `valid_for`).
    pub async fn create_queued(
        &self,
        zone: &str,
        id: &str,
        request_id: &str,
        node: Node,
        spot: bool,
        valid_for: Duration,
    ) -> Result<QueuedResource> {
        let spec = NodeSpec::default()
            .set_parent(self.parent(zone))
            .set_node_id(id)
            .set_node(node);
        let mut qr = QueuedResource::default()
            .set_tpu(QrTpu::default().set_node_spec([spec]))
            .set_queueing_policy(QueueingPolicy::default().set_valid_until_duration(
                google_cloud_wkt::Duration::clamp(valid_for.as_secs() as i64, 0),
            ));
        qr = if spot {
            qr.set_spot(Spot::default())
        } else {
            qr.set_guaranteed(Guaranteed::default())
        };
        self.client
            .create_queued_resource()
            .set_parent(self.parent(zone))
            .set_queued_resource_id(id)
            .set_request_id(request_id)
            .set_queued_resource(qr)
            .poller()
            .until_done()
            .await
    }

    pub async fn nodes(&self, zone: &str) -> Result<Vec<Node>> {
        Ok(every_page!(
            self.client.list_nodes().set_parent(self.parent(zone)),
            nodes
        ))
    }

    pub async fn queued(&self, zone: &str) -> Result<Vec<QueuedResource>> {
        Ok(every_page!(
            self.client
                .list_queued_resources()
                .set_parent(self.parent(zone)),
            queued_resources
        ))
    }

    pub async fn delete_node(&self, zone: &str, id: &str) -> Result<()> {
        self.client
            .delete_node()
            .set_name(format!("{}/nodes/{id}", self.parent(zone)))
            .poller()
            .until_done()
            .await
    }

    /// Deletes a queued resource and, with `force`, the node it made.
    pub async fn delete_queued(&self, zone: &str, id: &str, request_id: &str) -> Result<()> {
        self.client
            .delete_queued_resource()
            .set_name(format!("{}/queuedResources/{id}", self.parent(zone)))
            .set_request_id(request_id)
            .set_force(true)
            .poller()
            .until_done()
            .await
    }
}
