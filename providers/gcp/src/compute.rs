//! The Compute Engine calls tern makes, on google-cloud-rust's clients: one function per call,
//! every page read, every operation polled to DONE. Errors are returned raw; the provider maps
//! them through [`crate::errors`] with the offer they belong to.

use google_cloud_compute_v1::client::{
    AcceleratorTypes, InstanceTemplates, Instances, MachineTypes, RegionInstanceTemplates, Regions,
    ZoneOperations, Zones,
};
use google_cloud_compute_v1::model::{
    BulkInsertInstanceResource, Instance, InstanceTemplate, MachineType, Operation, Quota,
};
use google_cloud_lro::Poller;
use tern_cloud::ProviderError;

use crate::GcpConfig;

type Result<T> = std::result::Result<T, google_cloud_compute_v1::Error>;

/// The Compute clients of one project.
#[derive(Debug)]
pub struct Compute {
    project: String,
    instances: Instances,
    operations: ZoneOperations,
    machine_types: MachineTypes,
    accelerator_types: AcceleratorTypes,
    zones: Zones,
    regions: Regions,
    templates: InstanceTemplates,
    region_templates: RegionInstanceTemplates,
}

pub(crate) fn invalid(message: String) -> ProviderError {
    ProviderError::InvalidRequest { message }
}

impl Compute {
    pub async fn connect(config: &GcpConfig) -> std::result::Result<Self, ProviderError> {
        // google-cloud-auth is built without its aws-lc default; tern uses ring everywhere.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(Self {
            project: config.project.clone(),
            instances: client!(Instances, config, &config.endpoint),
            operations: client!(ZoneOperations, config, &config.endpoint),
            machine_types: client!(MachineTypes, config, &config.endpoint),
            accelerator_types: client!(AcceleratorTypes, config, &config.endpoint),
            zones: client!(Zones, config, &config.endpoint),
            regions: client!(Regions, config, &config.endpoint),
            templates: client!(InstanceTemplates, config, &config.endpoint),
            region_templates: client!(RegionInstanceTemplates, config, &config.endpoint),
        })
    }

    /// The UP zones of `region`.
    pub async fn zones(&self, region: &str) -> Result<Vec<String>> {
        let suffix = format!("/regions/{region}");
        let zones = every_page!(self.zones.list().set_project(&self.project), items);
        let mut out: Vec<String> = zones
            .into_iter()
            .filter(|z| z.region.as_deref().is_some_and(|r| r.ends_with(&suffix)))
            .filter(|z| z.status.as_ref().is_none_or(|s| s.name() == Some("UP")))
            .filter_map(|z| z.name)
            .collect();
        out.sort();
        Ok(out)
    }

    /// The project's quotas in `region` (`regions.get`'s `quotas`: metric, limit, usage).
    pub async fn region_quotas(&self, region: &str) -> Result<Vec<Quota>> {
        let region = self
            .regions
            .get()
            .set_project(&self.project)
            .set_region(region)
            .send()
            .await?;
        Ok(region.quotas)
    }

    pub async fn machine_types(&self, zone: &str) -> Result<Vec<MachineType>> {
        Ok(every_page!(
            self.machine_types
                .list()
                .set_project(&self.project)
                .set_zone(zone),
            items
        ))
    }

    /// The accelerator type names of a zone (`nvidia-tesla-v100`, …).
    pub async fn accelerator_types(&self, zone: &str) -> Result<Vec<String>> {
        let types = every_page!(
            self.accelerator_types
                .list()
                .set_project(&self.project)
                .set_zone(zone),
            items
        );
        Ok(types.into_iter().filter_map(|a| a.name).collect())
    }

    /// `instances.insert`, polled to DONE. The returned operation may carry an error.
    pub async fn insert(
        &self,
        zone: &str,
        body: Instance,
        request_id: &str,
        template: Option<&str>,
    ) -> Result<Operation> {
        self.instances
            .insert()
            .set_project(&self.project)
            .set_zone(zone)
            .set_request_id(request_id)
            .set_or_clear_source_instance_template(template)
            .set_body(body)
            .poller()
            .until_done()
            .await
    }

    /// `instances.bulkInsert`, polled to DONE. The returned operation may carry an error.
    pub async fn bulk_insert(
        &self,
        zone: &str,
        body: BulkInsertInstanceResource,
        request_id: &str,
    ) -> Result<Operation> {
        self.instances
            .bulk_insert()
            .set_project(&self.project)
            .set_zone(zone)
            .set_request_id(request_id)
            .set_body(body)
            .poller()
            .until_done()
            .await
    }

    /// Every instance of `zone` matching `filter`.
    pub async fn list(&self, zone: &str, filter: &str) -> Result<Vec<Instance>> {
        Ok(every_page!(
            self.instances
                .list()
                .set_project(&self.project)
                .set_zone(zone)
                .set_filter(filter),
            items
        ))
    }

    /// An instance template: global, or of `region` when given; in `project` when given.
    pub async fn template(
        &self,
        project: Option<&str>,
        region: Option<&str>,
        name: &str,
    ) -> Result<InstanceTemplate> {
        let project = project.unwrap_or(&self.project);
        match region {
            None => {
                self.templates
                    .get()
                    .set_project(project)
                    .set_instance_template(name)
                    .send()
                    .await
            }
            Some(region) => {
                self.region_templates
                    .get()
                    .set_project(project)
                    .set_region(region)
                    .set_instance_template(name)
                    .send()
                    .await
            }
        }
    }

    pub async fn get(&self, zone: &str, name: &str) -> Result<Instance> {
        self.instances
            .get()
            .set_project(&self.project)
            .set_zone(zone)
            .set_instance(name)
            .send()
            .await
    }

    /// `instances.delete`, polled to DONE.
    pub async fn delete(&self, zone: &str, name: &str, request_id: &str) -> Result<Operation> {
        self.instances
            .delete()
            .set_project(&self.project)
            .set_zone(zone)
            .set_instance(name)
            .set_request_id(request_id)
            .poller()
            .until_done()
            .await
    }

    /// The zone's operations matching `filter` (e.g. preemptions).
    pub async fn operations(&self, zone: &str, filter: &str) -> Result<Vec<Operation>> {
        Ok(every_page!(
            self.operations
                .list()
                .set_project(&self.project)
                .set_zone(zone)
                .set_filter(filter),
            items
        ))
    }
}
