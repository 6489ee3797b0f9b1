//! A job's `disk_gb` on AWS: the launch template's image names its root device, and each
//! CreateFleet override maps that device with the new size. Only the size changes; the volume
//! type, encryption and the rest keep the template's (or the image's) values.

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::{FleetBlockDeviceMappingRequest, FleetEbsBlockDeviceRequest};
use tern_cloud::ProviderError;

use crate::errors::from_sdk;
use crate::fleet::Template;

/// The root volume of every VM of one launch: the device the image boots from, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootDisk {
    pub device: String,
    pub gb: u32,
}

impl RootDisk {
    /// The block device mapping an override carries.
    pub fn mapping(&self) -> FleetBlockDeviceMappingRequest {
        FleetBlockDeviceMappingRequest::builder()
            .device_name(&self.device)
            .ebs(
                FleetEbsBlockDeviceRequest::builder()
                    .volume_size(i32::try_from(self.gb).unwrap_or(i32::MAX))
                    .build(),
            )
            .build()
    }
}

/// The root volume a launch asks for: none without `disk_gb`.
pub async fn root_disk(
    client: &Client,
    template: &Template,
    disk_gb: Option<u32>,
) -> Result<Option<RootDisk>, ProviderError> {
    let Some(gb) = disk_gb else {
        return Ok(None);
    };
    let device = root_device(client, template).await?;
    Ok(Some(RootDisk { device, gb }))
}

/// The root device name of the image `template` boots: DescribeLaunchTemplateVersions (with
/// SSM aliases resolved to an image id), then DescribeImages.
async fn root_device(client: &Client, template: &Template) -> Result<String, ProviderError> {
    let call = client
        .describe_launch_template_versions()
        .versions(&template.version)
        .resolve_alias(true);
    let call = if template.name_or_id.starts_with("lt-") {
        call.launch_template_id(&template.name_or_id)
    } else {
        call.launch_template_name(&template.name_or_id)
    };
    let versions = call.send().await.map_err(from_sdk)?;
    let unusable = |why: String| ProviderError::InvalidRequest {
        message: format!(
            "the job sets disk_gb, but launch template {} version {} {why}",
            template.name_or_id, template.version
        ),
    };
    let image = versions
        .launch_template_versions()
        .first()
        .and_then(|v| v.launch_template_data())
        .and_then(|d| d.image_id())
        .ok_or_else(|| {
            unusable("names no ImageId, so its root device is unknown: set one in it".into())
        })?
        .to_owned();
    let images = client
        .describe_images()
        .image_ids(&image)
        .send()
        .await
        .map_err(from_sdk)?;
    images
        .images()
        .first()
        .and_then(|i| i.root_device_name())
        .map(str::to_owned)
        .ok_or_else(|| {
            unusable(format!(
                "boots image {image}, which is not found or has no root device name"
            ))
        })
}
