# A tern controller on AWS with its workers' launch template and interruption queue: the
# walk-through in terraform/README.md applies this.

terraform {
  required_version = ">= 1.3"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}

provider "aws" {
  region = var.region
}

module "tern" {
  source = "../../modules/aws-controller"

  name                      = "tern"
  owner                     = var.owner
  token_parameter_name      = var.token_parameter_name
  tern_binary_url           = var.tern_binary_url
  tern_binary_sha256        = var.tern_binary_sha256
  worker_ami_id             = var.worker_ami_id
  allowed_instance_families = ["g4dn", "g5", "g6"]
  instance_types            = ["g4dn.xlarge", "g4dn.2xlarge", "g5.xlarge", "g6.xlarge"]
  state_backend             = var.state_backend
  controller_count          = var.state_backend == "postgres" ? 2 : 1

  team_budgets = {
    research = { total_usd = 500 }
    nlp      = { per_hour_usd = 20 }
  }

  # No worker_command: each job runs its own spec's [run] (see ../jobs/jobs/resnet.toml).
  worker_progress_file = "/var/lib/tern/progress.json"

  tags = {
    project = "tern-example"
  }
}
