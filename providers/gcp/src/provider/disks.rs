//! A job's `disk_gb` on GCE. Without a template the provider's own boot disk takes the size.
//! With one, the template's disks are read (`instanceTemplates.get`) and sent with the boot
//! disk resized: disks in the request replace the template's, so all of them go, the others
//! unchanged.

use google_cloud_compute_v1::model::AttachedDisk;
use tern_cloud::{LaunchRequest, ProviderError};

use super::GcpProvider;
use crate::errors::from_call;

/// A template reference's parts: `global/instanceTemplates/N`, `projects/P/global/…`,
/// `projects/P/regions/R/instanceTemplates/N` or any of those as a full URL.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TemplateRef<'a> {
    pub project: Option<&'a str>,
    pub region: Option<&'a str>,
    pub name: &'a str,
}

pub(super) fn template_ref(reference: &str) -> Option<TemplateRef<'_>> {
    let parts: Vec<&str> = reference.split('/').collect();
    let after = |key: &str| {
        parts
            .iter()
            .position(|p| *p == key)
            .and_then(|i| parts.get(i + 1).copied())
            .filter(|s| !s.is_empty())
    };
    Some(TemplateRef {
        project: after("projects"),
        region: after("regions"),
        name: after("instanceTemplates")?,
    })
}

impl GcpProvider {
    /// The disks a launch sends: `None` keeps the template's (or the provider's boot disk at
    /// its configured size); `Some` when the job sets `disk_gb`.
    pub(super) async fn disks(
        &self,
        request: &LaunchRequest,
    ) -> Result<Option<Vec<AttachedDisk>>, ProviderError> {
        let Some(gb) = request.disk_gb else {
            return Ok(None);
        };
        let Some(reference) = self.template(request) else {
            return Ok(Some(vec![self.boot_disk(i64::from(gb))]));
        };
        let unusable = |why: &str| ProviderError::InvalidRequest {
            message: format!("the job sets disk_gb, but instance template {reference} {why}"),
        };
        let r = template_ref(&reference)
            .ok_or_else(|| unusable("is not a template reference (…/instanceTemplates/NAME)"))?;
        let template = self
            .compute
            .template(r.project, r.region, r.name)
            .await
            .map_err(|e| from_call(&e, None))?;
        let mut disks = template.properties.map(|p| p.disks).unwrap_or_default();
        let boot = disks
            .iter_mut()
            .find(|d| d.boot == Some(true))
            .and_then(|d| d.initialize_params.as_mut())
            .ok_or_else(|| unusable("has no boot disk made at creation to resize"))?;
        boot.disk_size_gb = Some(i64::from(gb));
        Ok(Some(disks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_template_reference_names_its_template() {
        let global = TemplateRef {
            project: None,
            region: None,
            name: "w",
        };
        assert_eq!(template_ref("global/instanceTemplates/w"), Some(global));
        let full = template_ref(
            "https://compute.googleapis.com/compute/v1/projects/p-1/regions/us-central1/instanceTemplates/w",
        );
        assert_eq!(
            full,
            Some(TemplateRef {
                project: Some("p-1"),
                region: Some("us-central1"),
                name: "w",
            })
        );
        assert_eq!(template_ref("projects/p/global/instanceTemplates/"), None);
        assert_eq!(template_ref("tern-workers"), None);
    }
}
