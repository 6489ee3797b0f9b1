# The workers' instance template (`--instance-template`). tern sets the machine type, GPUs,
# zone, scheduling (spot or standard), labels and description of each VM; the template sets
# the image, disk, network, service account and the startup script, which installs tern and
# starts `tern agent` for the job named in the VM's description (tern's exact tags).

resource "google_compute_instance_template" "workers" {
  project     = var.project
  name        = local.template_name
  description = "tern workers: tern agent for the job in the VM's tern tags."
  # Required by the API; tern sets each VM's machine type.
  machine_type = "n1-standard-1"
  tags         = [local.worker_tag]

  disk {
    source_image = var.worker_image
    disk_size_gb = var.worker_disk_size_gb
    boot         = true
    auto_delete  = true
  }

  network_interface {
    network    = var.network
    subnetwork = var.subnetwork
    # An external address (tern's role has compute.subnetworks.useExternalIp).
    access_config {}
  }

  service_account {
    email  = google_service_account.worker.email
    scopes = ["cloud-platform"]
  }

  metadata = {
    startup-script = templatefile("${path.module}/templates/worker-startup.sh.tftpl", {
      common             = local.common_script
      controller_url     = local.controller_url
      progress_file      = var.worker_progress_file
      checkpoint_command = local.checkpoint
      agent_args         = local.worker_args
      command            = local.worker_command
    })
  }

  depends_on = [google_project_service.apis]
}
