# Shared lookups and values. The other files hold one concept each: iam.tf (service
# accounts, the custom roles, secret access), workers.tf (instance template), controller.tf
# (the controller VM), network.tf (firewall rules).

data "google_compute_zones" "up" {
  project = var.project
  region  = var.region
  status  = "UP"
}

resource "google_project_service" "apis" {
  for_each = var.enable_apis ? toset([
    "compute.googleapis.com",
    "tpu.googleapis.com",
    "cloudbilling.googleapis.com",
    "secretmanager.googleapis.com",
    "iam.googleapis.com",
  ]) : toset([])
  project            = var.project
  service            = each.value
  disable_on_destroy = false
}

locals {
  controller_zone = length(var.zones) > 0 ? var.zones[0] : sort(data.google_compute_zones.up.names)[0]
  worker_tag      = "${var.name}-worker"
  controller_tag  = "${var.name}-controller"
  template_name   = "${var.name}-workers"

  # A gs:// binary is read through the service accounts; an https:// one needs no permission.
  binary_gs     = startswith(var.tern_binary_url, "gs://") ? regex("^gs://([^/]+)/(.+)$", var.tern_binary_url) : null
  binary_bucket = local.binary_gs == null ? "" : local.binary_gs[0]
  binary_object = local.binary_gs == null ? "" : local.binary_gs[1]

  # The controller's `--quota` file: team budgets only.
  quota_toml = join("\n", flatten([
    for team, b in var.team_budgets : concat(
      ["[team.\"${team}\"]"],
      b.total_usd == null ? [] : ["total_usd = ${b.total_usd}"],
      b.per_hour_usd == null ? [] : ["per_hour_usd = ${b.per_hour_usd}"],
      [""],
    )
  ]))

  # Shell words, each in single quotes, for the generated scripts.
  worker_command = join(" ", [for w in var.worker_command : "'${replace(w, "'", "'\\''")}'"])
  worker_args    = join(" ", [for w in var.worker_agent_args : "'${replace(w, "'", "'\\''")}'"])
  checkpoint     = var.worker_checkpoint_command == null ? "" : "'${replace(var.worker_checkpoint_command, "'", "'\\''")}'"

  # Shell functions both startup scripts use: the metadata server, Secret Manager, and tern.
  common_script = templatefile("${path.module}/templates/common.sh.tftpl", {
    project       = var.project
    binary_url    = var.tern_binary_url
    binary_bucket = local.binary_bucket
    binary_object = local.binary_object
    binary_sha256 = var.tern_binary_sha256 == null ? "" : var.tern_binary_sha256
  })

  controller_url = "http://${google_compute_address.controller.address}:${var.api_port}"
}
