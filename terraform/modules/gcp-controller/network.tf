# Who may reach whom: workers reach the controller's API and each other; the API is open to
# api_allowed_cidrs, and to Identity-Aware Proxy for tunnels when enable_iap_tunnel is set.

locals {
  # Identity-Aware Proxy's TCP forwarding range.
  iap_range  = "35.235.240.0/20"
  api_ranges = concat(var.api_allowed_cidrs, var.enable_iap_tunnel ? [local.iap_range] : [])
}

resource "google_compute_firewall" "api_from_workers" {
  project     = var.project
  name        = "${var.name}-api-from-workers"
  network     = var.network
  description = "tern workers report to the controller's API."
  source_tags = [local.worker_tag]
  target_tags = [local.controller_tag]

  allow {
    protocol = "tcp"
    ports    = [tostring(var.api_port)]
  }
}

resource "google_compute_firewall" "api_from_ranges" {
  count         = length(local.api_ranges) > 0 ? 1 : 0
  project       = var.project
  name          = "${var.name}-api-from-ranges"
  network       = var.network
  description   = "The controller's API (and SSH through IAP) from api_allowed_cidrs and IAP."
  source_ranges = local.api_ranges
  target_tags   = [local.controller_tag]

  allow {
    protocol = "tcp"
    ports    = var.enable_iap_tunnel ? [tostring(var.api_port), "22"] : [tostring(var.api_port)]
  }
}

resource "google_compute_firewall" "workers_to_workers" {
  project     = var.project
  name        = "${var.name}-workers-to-workers"
  network     = var.network
  description = "Training traffic between tern workers."
  source_tags = [local.worker_tag]
  target_tags = [local.worker_tag]

  allow {
    protocol = "all"
  }
}
