# The controller VM: `tern controller --provider gcp` under systemd, on the controller's
# service account. Its internal address is reserved, so the workers' template names it and it
# survives a new VM; SQLite state lives on a persistent disk of its own for the same reason.
# The startup script runs at every boot: a changed configuration applies after a reboot.

resource "google_compute_address" "controller" {
  project      = var.project
  region       = var.region
  name         = "${var.name}-controller"
  address_type = "INTERNAL"
  # An auto-mode network's subnetwork has the network's name.
  subnetwork = coalesce(var.subnetwork, var.network)
}

resource "google_compute_disk" "state" {
  count   = var.state_url_secret_id == null ? 1 : 0
  project = var.project
  zone    = local.controller_zone
  name    = "${var.name}-controller-state"
  type    = "pd-balanced"
  size    = 10
  labels  = var.labels
}

resource "google_compute_instance" "controller" {
  project      = var.project
  zone         = local.controller_zone
  name         = "${var.name}-controller"
  machine_type = var.controller_machine_type
  tags         = [local.controller_tag]
  labels       = var.labels
  # A new machine type stops and starts the VM instead of failing.
  allow_stopping_for_update = true

  boot_disk {
    initialize_params {
      image = var.controller_image
      size  = 20
    }
  }

  dynamic "attached_disk" {
    for_each = google_compute_disk.state
    content {
      source      = attached_disk.value.id
      device_name = "tern-state"
    }
  }

  network_interface {
    network    = var.network
    subnetwork = var.subnetwork
    network_ip = google_compute_address.controller.address
    # An external address to reach Google APIs without Cloud NAT; the firewall keeps the API
    # closed to the internet.
    access_config {}
  }

  service_account {
    email  = google_service_account.controller.email
    scopes = ["cloud-platform"]
  }

  shielded_instance_config {
    enable_secure_boot = true
  }

  metadata = {
    startup-script = templatefile("${path.module}/templates/controller-startup.sh.tftpl", {
      common         = local.common_script
      project        = var.project
      region         = var.region
      zones          = var.zones
      machine_types  = var.machine_types
      quota_toml     = local.quota_toml
      token_secret   = var.token_secret_id
      state_secret   = var.state_url_secret_id == null ? "" : var.state_url_secret_id
      worker_account = google_service_account.worker.email
      template       = "global/instanceTemplates/${local.template_name}"
      owner          = var.owner
      api_port       = var.api_port
      has_state_disk = var.state_url_secret_id == null
    })
    block-project-ssh-keys = "true"
  }

  lifecycle {
    # A new image release must not replace the controller.
    ignore_changes = [boot_disk[0].initialize_params[0].image]
  }

  depends_on = [
    google_project_service.apis,
    google_project_iam_member.controller,
    google_secret_manager_secret_iam_member.token,
  ]
}
