//! The IAM permissions tern's GCP provider uses: one list that the README's custom role, the
//! Terraform module and the tests read.

/// Every permission `tern-gcp` needs, with the call that needs it.
pub const PERMISSIONS: &[(&str, &str)] = &[
    ("compute.zones.list", "zones.list: the region's zones"),
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
];

/// The permission names alone, sorted.
pub fn names() -> Vec<&'static str> {
    let mut v: Vec<&str> = PERMISSIONS.iter().map(|(p, _)| *p).collect();
    v.sort_unstable();
    v
}
