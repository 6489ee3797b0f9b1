# A tern controller on GCP with its workers' instance template.

terraform {
  required_version = ">= 1.3"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 5.0"
    }
  }
}

provider "google" {
  project = var.project
  region  = var.region
}

module "tern" {
  source = "../../modules/gcp-controller"

  project            = var.project
  region             = var.region
  zones              = ["${var.region}-a", "${var.region}-b"]
  name               = "tern"
  owner              = var.owner
  token_secret_id    = var.token_secret_id
  tern_binary_url    = var.tern_binary_url
  tern_binary_sha256 = var.tern_binary_sha256
  worker_image       = var.worker_image
  machine_types      = ["g2-standard-8", "a2-highgpu-1g"]

  team_budgets = {
    research = { total_usd = 500 }
  }

  # No worker_command: each job runs its own spec's [run] (see ../jobs/jobs/resnet.toml).
}
