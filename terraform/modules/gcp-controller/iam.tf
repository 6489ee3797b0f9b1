# The controller's service account holds exactly the permissions tern-gcp calls
# (tern_gcp::permissions::PERMISSIONS; tests/terraform_modules.rs checks that the custom
# roles below hold that list between them, with nothing else). They are split in two so
# each is granted where it is needed:
# - `controller`: everything but acting as a service account, on the project;
# - `worker_user`: `iam.serviceAccounts.actAs`, on the workers' service account only, so the
#   controller cannot start VMs as any other account of the project.
# Reading the token (and the state URL, and a gs:// binary) is granted apart, per secret; the
# workers never read the token: each uses its job's agent token from its VM's tern tags.

resource "google_service_account" "controller" {
  project      = var.project
  account_id   = "${var.name}-controller"
  display_name = "tern controller"
}

resource "google_service_account" "worker" {
  project      = var.project
  account_id   = "${var.name}-worker"
  display_name = "tern workers"
}

resource "google_project_iam_custom_role" "controller" {
  project     = var.project
  role_id     = "${replace(var.name, "-", "_")}_controller"
  title       = "tern controller"
  description = "Exactly the Compute and Cloud TPU permissions tern-gcp calls (but actAs)."
  permissions = [
    "compute.acceleratorTypes.list",
    "compute.disks.create",
    "compute.images.useReadOnly",
    "compute.instanceTemplates.get",
    "compute.instanceTemplates.useReadOnly",
    "compute.instances.create",
    "compute.instances.delete",
    "compute.instances.get",
    "compute.instances.list",
    "compute.instances.setLabels",
    "compute.instances.setMetadata",
    "compute.instances.setServiceAccount",
    "compute.machineTypes.list",
    "compute.regions.get",
    "compute.subnetworks.use",
    "compute.subnetworks.useExternalIp",
    "compute.zoneOperations.get",
    "compute.zoneOperations.list",
    "compute.zones.list",
    "tpu.acceleratorTypes.list",
    "tpu.nodes.create",
    "tpu.nodes.delete",
    "tpu.nodes.list",
    "tpu.operations.get",
    "tpu.queuedResources.create",
    "tpu.queuedResources.delete",
    "tpu.queuedResources.list",
  ]
}

resource "google_project_iam_custom_role" "worker_user" {
  project     = var.project
  role_id     = "${replace(var.name, "-", "_")}_worker_user"
  title       = "tern controller: run VMs as the workers"
  description = "The one tern-gcp permission granted on the workers' service account only."
  permissions = ["iam.serviceAccounts.actAs"]
}

resource "google_project_iam_member" "controller" {
  project = var.project
  role    = google_project_iam_custom_role.controller.id
  member  = "serviceAccount:${google_service_account.controller.email}"
}

resource "google_service_account_iam_member" "controller_acts_as_worker" {
  service_account_id = google_service_account.worker.name
  role               = google_project_iam_custom_role.worker_user.id
  member             = "serviceAccount:${google_service_account.controller.email}"
}

resource "google_secret_manager_secret_iam_member" "token" {
  for_each = {
    controller = "serviceAccount:${google_service_account.controller.email}"
  }
  project   = var.project
  secret_id = var.token_secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = each.value
}

resource "google_secret_manager_secret_iam_member" "state_url" {
  count     = var.state_url_secret_id == null ? 0 : 1
  project   = var.project
  secret_id = var.state_url_secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.controller.email}"
}

resource "google_storage_bucket_iam_member" "binary" {
  for_each = local.binary_bucket == "" ? {} : {
    controller = "serviceAccount:${google_service_account.controller.email}"
    worker     = "serviceAccount:${google_service_account.worker.email}"
  }
  bucket = local.binary_bucket
  role   = "roles/storage.objectViewer"
  member = each.value

  # The binary only (the bucket needs uniform bucket-level access for conditions).
  condition {
    title      = "tern binary only"
    expression = "resource.name == \"projects/_/buckets/${local.binary_bucket}/objects/${local.binary_object}\""
  }
}
