//! What one VM launch sends to Compute: the instance properties an offer describes (labels,
//! GPUs, scheduling, disks, network) and the `insert`/`bulkInsert` call with its retries.

use std::time::Duration;

use google_cloud_compute_v1::model::scheduling::{
    InstanceTerminationAction, OnHostMaintenance, ProvisioningModel,
};
use google_cloud_compute_v1::model::{
    AcceleratorConfig, AccessConfig, AttachedDisk, AttachedDiskInitializeParams,
    BulkInsertInstanceResource, Instance as GceInstance, InstanceProperties, NetworkInterface,
    Operation, Scheduling, ServiceAccount,
};
use tern_cloud::{Capacity, LaunchRequest, Offer, ProviderError};
use tracing::{debug, info};

use super::{GcpProvider, request_id};
use crate::errors::{from_call, from_operation, is_already_exists};
use crate::{labels, offers};

impl GcpProvider {
    /// The VM an offer describes, with tern's labels, the exact tags in its description, GPUs
    /// on N1 hosts, and spot or standard scheduling that terminates on host maintenance.
    pub(super) fn properties(
        &self,
        offer: &Offer,
        request: &LaunchRequest,
        disks: Option<&[AttachedDisk]>,
    ) -> InstanceProperties {
        let mut p = InstanceProperties::default();
        p.machine_type = Some(offer.instance_type.name.clone());
        p.labels = labels::from_tags(&request.tags).into_iter().collect();
        p.description = Some(labels::description(&request.tags));
        if let Some((gpu, count)) = offers::guest_accelerator(offer) {
            let mut acc = AcceleratorConfig::default();
            acc.accelerator_type = Some(gpu.to_owned());
            acc.accelerator_count = i32::try_from(count).ok();
            p.guest_accelerators = vec![acc];
        }
        p.scheduling = Some(scheduling(offer.capacity));
        if self.template(request).is_none() {
            p.disks = vec![self.boot_disk(self.config.disk_size_gb)];
            p.network_interfaces = vec![self.network()];
        }
        if let Some(disks) = disks {
            p.disks = disks.to_vec();
        }
        if let Some(email) = &self.config.service_account {
            let mut sa = ServiceAccount::default();
            sa.email = Some(email.clone());
            sa.scopes = vec!["https://www.googleapis.com/auth/cloud-platform".into()];
            p.service_accounts = vec![sa];
        }
        p
    }

    pub(super) fn boot_disk(&self, gb: i64) -> AttachedDisk {
        let mut init = AttachedDiskInitializeParams::default();
        init.source_image = Some(self.config.image.clone());
        init.disk_size_gb = Some(gb);
        let mut disk = AttachedDisk::default();
        disk.boot = Some(true);
        disk.auto_delete = Some(true);
        disk.initialize_params = Some(init);
        disk
    }

    pub(super) fn network(&self) -> NetworkInterface {
        let mut nat = AccessConfig::default();
        nat.name = Some("External NAT".into());
        let mut nic = NetworkInterface::default();
        nic.network = Some(self.config.network.clone());
        nic.access_configs = vec![nat];
        nic
    }

    pub(super) fn template(&self, request: &LaunchRequest) -> Option<String> {
        request
            .template
            .clone()
            .or_else(|| self.config.instance_template.clone())
    }

    /// A single VM for `instances.insert`: the properties with a name and zone-scoped URLs.
    pub(super) fn instance_body(
        &self,
        zone: &str,
        name: &str,
        p: InstanceProperties,
    ) -> GceInstance {
        let mut i = GceInstance::default();
        i.name = Some(name.to_owned());
        i.machine_type = p
            .machine_type
            .map(|t| format!("zones/{zone}/machineTypes/{t}"));
        i.labels = p.labels;
        i.description = p.description;
        i.guest_accelerators = p
            .guest_accelerators
            .into_iter()
            .map(|mut a| {
                a.accelerator_type = a
                    .accelerator_type
                    .map(|t| format!("zones/{zone}/acceleratorTypes/{t}"));
                a
            })
            .collect();
        i.scheduling = p.scheduling;
        i.disks = p.disks;
        i.network_interfaces = p.network_interfaces;
        i.service_accounts = p.service_accounts;
        i
    }

    /// One offer's attempt: `insert` for one VM, `bulkInsert` with `minCount` for more. A
    /// rate-limited call is resent with the same requestId (the client does not retry POSTs).
    pub(super) async fn launch_offer(
        &self,
        request: &LaunchRequest,
        n: usize,
        offer: &Offer,
        count: u32,
        min_count: u32,
        disks: Option<&[AttachedDisk]>,
    ) -> Result<(), ProviderError> {
        let zone = offer.zone.0.as_str();
        let rid = request_id(&request.key, &offer.key());
        let prefix = format!(
            "tern-{}-{n}",
            &request.key.as_uuid().simple().to_string()[..16]
        );
        let props = self.properties(offer, request, disks);
        let template = self.template(request);
        if self.config.dry_run {
            info!(call = if count == 1 { "instances.insert" } else { "instances.bulkInsert" },
                  %zone, request_id = %rid, name = %prefix, count, min_count,
                  properties = ?props, "dry run: not sent");
            return Ok(());
        }
        let mut delay = self.config.poll_interval;
        for attempt in 0..=self.config.throttle_retries {
            let result = if count == 1 {
                let body = self.instance_body(zone, &format!("{prefix}-0001"), props.clone());
                self.compute
                    .insert(zone, body, &rid, template.as_deref())
                    .await
            } else {
                let mut bulk = BulkInsertInstanceResource::default();
                bulk.count = Some(i64::from(count));
                bulk.min_count = Some(i64::from(min_count.max(1)));
                bulk.name_pattern = Some(format!("{prefix}-####"));
                bulk.instance_properties = Some(props.clone());
                bulk.source_instance_template = template.clone();
                self.compute.bulk_insert(zone, bulk, &rid).await
            };
            match result {
                Ok(op) => return done(&op, &offer.key()),
                // The name is the intent's: an earlier attempt made it.
                Err(e) if is_already_exists(&e) => return Ok(()),
                Err(e) => {
                    let err = from_call(&e, Some(&offer.key()));
                    if !err.is_throttled() || attempt == self.config.throttle_retries {
                        return Err(err);
                    }
                    debug!(%zone, request_id = %rid, attempt, "rate limited; resending with the same requestId");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
        Err(ProviderError::Throttled { retry_after: None })
    }
}

/// TPU slices launch through the Cloud TPU API, not Compute.
pub(super) fn is_tpu(offer: &Offer) -> bool {
    offer.instance_type.name.starts_with("tpu-")
}

/// An operation that ended DONE: its error, if it carries one.
fn done(op: &Operation, offer: &str) -> Result<(), ProviderError> {
    from_operation(op, Some(offer)).map_or(Ok(()), Err)
}

fn scheduling(capacity: Capacity) -> Scheduling {
    let mut s = Scheduling::default();
    // GPU VMs cannot live-migrate.
    s.on_host_maintenance = Some(OnHostMaintenance::Terminate);
    s.automatic_restart = Some(false);
    if capacity == Capacity::Spot {
        s.provisioning_model = Some(ProvisioningModel::Spot);
        s.instance_termination_action = Some(InstanceTerminationAction::Delete);
    } else {
        s.provisioning_model = Some(ProvisioningModel::Standard);
    }
    s
}
