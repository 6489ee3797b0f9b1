//! The IAM permissions tern's GCP provider uses: one list that the README's custom role, the
//! Terraform module and the tests read.

/// Every permission `tern-gcp` needs, with the call that needs it.
pub const PERMISSIONS: &[(&str, &str)] = &[
    ("compute.zones.list", "zones.list: the region's zones"),
    (
        "compute.regions.get",
        "regions.get: the project's GPU quotas in the region",
    ),
    (
        "compute.machineTypes.list",
        "machineTypes.list: shapes per zone",
    ),
    (
        "compute.acceleratorTypes.list",
        "acceleratorTypes.list: GPUs per zone",
    ),
    (
        "compute.instances.create",
        "instances.insert, instances.bulkInsert",
    ),
    ("compute.instances.setLabels", "labels at creation"),
    (
        "compute.instances.setMetadata",
        "metadata at creation (template)",
    ),
    (
        "compute.instances.setServiceAccount",
        "the workers' service account at creation",
    ),
    (
        "compute.instances.list",
        "instances.list by label: idempotency, leaks",
    ),
    (
        "compute.instances.get",
        "instances.get before delete: the owner check",
    ),
    ("compute.instances.delete", "instances.delete"),
    ("compute.disks.create", "boot disks at creation"),
    ("compute.subnetworks.use", "the workers' network"),
    (
        "compute.subnetworks.useExternalIp",
        "an external address for the workers",
    ),
    (
        "compute.instanceTemplates.useReadOnly",
        "instances from the workers' template",
    ),
    (
        "compute.instanceTemplates.get",
        "instanceTemplates.get: the template's disks, for a job's disk_gb",
    ),
    ("compute.images.useReadOnly", "the boot image"),
    (
        "compute.zoneOperations.get",
        "polling insert/delete operations",
    ),
    (
        "compute.zoneOperations.list",
        "preemption notices (compute.instances.preempted)",
    ),
    (
        "iam.serviceAccounts.actAs",
        "running workers as their service account",
    ),
    ("tpu.acceleratorTypes.list", "TPU slice types per zone"),
    ("tpu.nodes.create", "small spot slices, created directly"),
    (
        "tpu.nodes.list",
        "slices: idempotency, leaks, preemptions, the owner check",
    ),
    (
        "tpu.nodes.delete",
        "slices, and PREEMPTED nodes (they hold quota)",
    ),
    ("tpu.queuedResources.create", "large or on-demand slices"),
    (
        "tpu.queuedResources.list",
        "queued slices: state, leaks, the owner check",
    ),
    (
        "tpu.queuedResources.delete",
        "cancelling a queued slice, deleting a suspended one",
    ),
    ("tpu.operations.get", "polling TPU operations"),
];

/// The permission names alone, sorted. The Cloud Billing Catalog (public prices) needs no
/// IAM permission, only the Cloud Billing API enabled.
pub fn names() -> Vec<&'static str> {
    let mut v: Vec<&str> = PERMISSIONS.iter().map(|(p, _)| *p).collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_permission_is_listed_once_and_well_formed() {
        let names = names();
        let mut unique = names.clone();
        unique.dedup();
        assert_eq!(names, unique);
        for p in names {
            let parts: Vec<&str> = p.split('.').collect();
            assert_eq!(parts.len(), 3, "{p}");
            assert!(["compute", "iam", "tpu"].contains(&parts[0]), "{p}");
        }
    }

    #[test]
    fn the_readme_lists_exactly_these_permissions() {
        let readme = include_str!("../README.md");
        let listed: Vec<&str> = readme
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- `"))
            .filter_map(|l| l.split('`').next())
            .filter(|p| p.split('.').count() == 3 && !p.contains(' '))
            .collect();
        let mut listed = listed;
        listed.sort_unstable();
        assert_eq!(listed, names());
    }
}
