//! One CreateFleet `type=instant` call per capacity type, and its answer mapped back onto the
//! offers it was built from.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_ec2::Client;
use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
use aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, LaunchTemplateAndOverridesResponse,
    OnDemandOptionsRequest, ResourceType, SpotAllocationStrategy, SpotOptionsRequest, Tag,
    TagSpecification, TargetCapacitySpecificationRequest,
};
use chrono::{DateTime, Utc};
use tern_cloud::{
    Capacity, Instance, InstanceId, InstanceState, LaunchRequest, Offer, ProviderError, Tags,
};

use crate::AwsConfig;
use crate::disk::RootDisk;
use crate::errors::classify;
use crate::offers::ZoneMap;

/// Extra tag naming the launch (its ClientToken), so a launch repeated after a crash finds the
/// instances the first attempt made even where the API does not remember the token.
pub const LAUNCH_TAG: &str = "tern:launch";

/// A launch template given by id (`lt-…`) or by name.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub name_or_id: String,
    pub version: String,
}

impl Template {
    /// The request's template, else the configured one, at the configured version.
    pub fn of(request: &LaunchRequest, config: &AwsConfig) -> Result<Template, ProviderError> {
        let name_or_id = request
            .template
            .clone()
            .or_else(|| config.launch_template.clone())
            .ok_or_else(|| ProviderError::InvalidRequest {
                message: "no launch template: the request names none and the AWS config has no \
                          launch_template"
                    .into(),
            })?;
        Ok(Template {
            name_or_id,
            version: config.launch_template_version.clone(),
        })
    }
}

/// Everything one CreateFleet call needs.
#[derive(Debug)]
pub struct FleetCall<'a> {
    /// This call's ClientToken.
    pub token: String,
    /// The launch's token, tagged on every instance of every call of one launch.
    pub launch: String,
    pub capacity: Capacity,
    /// Offers of that capacity, best first; each becomes one override.
    pub offers: Vec<&'a Offer>,
    pub count: u32,
    pub min_count: u32,
    pub single_zone: bool,
    pub tags: Tags,
    pub template: Template,
    /// The job's root volume size, on the device the template's image boots from.
    pub root_disk: Option<RootDisk>,
    /// AZ id → subnet id, for accounts without default subnets.
    pub subnets: &'a BTreeMap<String, String>,
}

impl FleetCall<'_> {
    /// Build the request. Fails only if an offer's zone is unknown to this account.
    pub fn request(
        &self,
        client: &Client,
        zones: &ZoneMap,
    ) -> Result<CreateFleetFluentBuilder, ProviderError> {
        let spot = self.capacity == Capacity::Spot;
        let config = self.template_config(zones)?;
        let tags: Vec<Tag> = self
            .tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .chain([Tag::builder().key(LAUNCH_TAG).value(&self.launch).build()])
            .collect();
        let tagged = |kind| {
            TagSpecification::builder()
                .resource_type(kind)
                .set_tags(Some(tags.clone()))
                .build()
        };
        let min = (self.single_zone && self.min_count > 0).then_some(self.min_count as i32);
        let mut call = client
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(&self.token)
            .launch_template_configs(config)
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(self.count as i32)
                    .default_target_capacity_type(if spot {
                        DefaultTargetCapacityType::Spot
                    } else {
                        DefaultTargetCapacityType::OnDemand
                    })
                    .build(),
            )
            .tag_specifications(tagged(ResourceType::Instance))
            .tag_specifications(tagged(ResourceType::Volume));
        if spot {
            call = call.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .single_availability_zone(self.single_zone)
                    .set_min_target_capacity(min)
                    .build(),
            );
        } else {
            call = call.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::Prioritized)
                    .single_availability_zone(self.single_zone)
                    .set_min_target_capacity(min)
                    .build(),
            );
        }
        Ok(call)
    }

    /// The launch template with one override per offer (in the plan's order).
    fn template_config(
        &self,
        zones: &ZoneMap,
    ) -> Result<FleetLaunchTemplateConfigRequest, ProviderError> {
        let spec = if self.template.name_or_id.starts_with("lt-") {
            FleetLaunchTemplateSpecificationRequest::builder()
                .launch_template_id(&self.template.name_or_id)
        } else {
            FleetLaunchTemplateSpecificationRequest::builder()
                .launch_template_name(&self.template.name_or_id)
        }
        .version(&self.template.version)
        .build();
        let spot = self.capacity == Capacity::Spot;
        let mut config =
            FleetLaunchTemplateConfigRequest::builder().launch_template_specification(spec);
        for (rank, offer) in self.offers.iter().enumerate() {
            let zone =
                zones
                    .name(offer.zone.as_str())
                    .ok_or_else(|| ProviderError::InvalidRequest {
                        message: format!(
                            "zone {} of offer {} is not an availability zone of this account in {}",
                            offer.zone,
                            offer.key(),
                            offer.region
                        ),
                    })?;
            let o = FleetLaunchTemplateOverridesRequest::builder()
                .instance_type(offer.instance_type.name.as_str().into());
            // A subnet fixes the zone; without one, the zone picks the default subnet.
            let mut o = match self.subnets.get(offer.zone.as_str()) {
                Some(subnet) => o.subnet_id(subnet),
                None => o.availability_zone(zone),
            };
            if let Some(disk) = &self.root_disk {
                o = o.block_device_mappings(disk.mapping());
            }
            if !spot {
                // On-demand follows the plan's ranking; spot lets AWS weigh price and depth.
                o = o.priority(rank as f64);
            }
            config = config.overrides(o.build());
        }
        Ok(config.build())
    }

    /// The offer an instance or error entry belongs to: same type and zone, else same type,
    /// else none.
    fn offer_of(
        &self,
        lto: Option<&LaunchTemplateAndOverridesResponse>,
        instance_type: Option<&str>,
        zone_name: Option<&str>,
        zones: &ZoneMap,
    ) -> Option<&Offer> {
        let overrides = lto.and_then(|l| l.overrides());
        let t = instance_type.or_else(|| overrides?.instance_type().map(|t| t.as_str()))?;
        let by_subnet = || {
            let subnet = overrides?.subnet_id()?;
            self.subnets
                .iter()
                .find(|(_, s)| s.as_str() == subnet)
                .map(|(zone, _)| zone.as_str())
        };
        let zone = zone_name
            .or_else(|| overrides?.availability_zone())
            .and_then(|n| zones.id(n))
            .or_else(by_subnet);
        let same_type = || self.offers.iter().filter(|o| o.instance_type.name == t);
        same_type()
            .find(|o| Some(o.zone.as_str()) == zone)
            .or_else(|| same_type().next())
            .copied()
    }

    /// Instances launched and per-override errors, classified. Errors that name no override
    /// are reported against every offer of the call.
    pub fn outcome(
        &self,
        out: &CreateFleetOutput,
        zones: &ZoneMap,
        now: DateTime<Utc>,
    ) -> (Vec<Instance>, Vec<(String, ProviderError)>) {
        let mut instances = Vec::new();
        let mut tags = self.tags.clone();
        tags.insert(LAUNCH_TAG.to_owned(), self.launch.clone());
        let tags = Arc::new(tags);
        for entry in out.instances() {
            let offer = self
                .offer_of(
                    entry.launch_template_and_overrides(),
                    entry.instance_type().map(|t| t.as_str()),
                    entry.availability_zone(),
                    zones,
                )
                .or_else(|| self.offers.first().copied());
            let Some(offer) = offer else { continue };
            let offer = Arc::new(offer.clone());
            for id in entry.instance_ids() {
                instances.push(Instance {
                    id: InstanceId::new(id.clone()),
                    offer: offer.clone(),
                    state: InstanceState::Pending,
                    tags: tags.clone(),
                    launched_at: now,
                });
            }
        }
        let mut errors = Vec::new();
        for e in out.errors() {
            let code = e.error_code().unwrap_or("Unknown");
            let message = e.error_message().unwrap_or_default();
            match self.offer_of(e.launch_template_and_overrides(), None, None, zones) {
                Some(o) => errors.push((o.key(), classify(code, message, Some(&o.key())))),
                None => {
                    for o in &self.offers {
                        errors.push((o.key(), classify(code, message, Some(&o.key()))));
                    }
                }
            }
        }
        (instances, errors)
    }
}
