# Jobs declared in Terraform: pick an offer, plan a spec, and run two training jobs on a tern
# controller. terraform/README.md walks through it; tests/terraform_provider.rs runs it.

terraform {
  required_providers {
    tern = {
      source  = "tern/tern"
      version = "0.1.0"
    }
  }
}

# The token comes from TERN_TOKEN, so it never sits in the configuration.
provider "tern" {
  endpoint = var.endpoint
}

variable "endpoint" {
  description = "The tern controller's API URL."
  type        = string
  default     = "http://127.0.0.1:8470"
}

variable "sweep_steps" {
  description = "Training steps of the inline sweep job; changing it replaces the job."
  type        = number
  default     = 20000
}

# The three cheapest spot T4 offers on AWS, for your own aws_instance if you want one.
data "tern_offers" "t4" {
  accelerator = "T4"
  cloud       = "aws"
  capacity    = "spot"
  limit       = 3
}

# What the controller itself sees: the offers it last read from its cloud, at the prices it
# pays (here the simulated cloud's V100 pools).
data "tern_offers" "live" {
  source      = "controller"
  accelerator = "V100"
}

# What the planner would choose for the ResNet job on the bundled catalog, and what it
# expects it to cost.
data "tern_plan" "resnet" {
  spec_file = "${path.module}/jobs/resnet.toml"
}

# A job from a TOML spec file.
resource "tern_job" "resnet" {
  spec_file = "${path.module}/jobs/resnet.toml"
}

# A job written inline: the same keys and tables as a TOML spec.
resource "tern_job" "sweep" {
  job = {
    name         = "sweep"
    team         = "research"
    accelerators = ["T4", "V100"]
    deadline     = "24h"
    workers      = 1
    local_batch  = 32
    work         = { steps = var.sweep_steps, batch = 32 }
    budget       = { per_hour_usd = 4.5 }
    observation = [
      { accelerator = "V100", gpus = 1, local_batch = 32, step_seconds = 0.11 },
    ]
  }
}

output "cheapest_t4" {
  value = "${data.tern_offers.t4.cheapest.instance_type} in ${data.tern_offers.t4.cheapest.zone} at ${data.tern_offers.t4.cheapest.price_per_hour} USD/h"
}

output "live_v100_zones" {
  value = sort(distinct([for o in data.tern_offers.live.offers : o.zone]))
}

output "resnet_plan" {
  value = {
    instance_type = data.tern_plan.resnet.instance_type
    zone          = data.tern_plan.resnet.zone
    capacity      = data.tern_plan.resnet.capacity
    expected_cost = data.tern_plan.resnet.expected_cost_usd
    finish_hours  = data.tern_plan.resnet.expected_finish_hours
  }
}

output "jobs" {
  value = {
    resnet = tern_job.resnet.name
    sweep  = tern_job.sweep.name
  }
}
