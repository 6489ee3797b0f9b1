variable "project" {
  description = "The project tern launches in (`--project`); the controller, its service accounts and roles live there too."
  type        = string
}

variable "region" {
  description = "The home region (`--region`): offers, launches, the controller VM."
  type        = string
}

variable "zones" {
  description = "Zones of the region tern may use (`--zone`); empty: every zone that is UP. The controller VM goes to the first (or the region's first zone)."
  type        = list(string)
  default     = []
}

variable "name" {
  description = "Prefix of every resource name (service accounts, roles, template, VM, firewall rules)."
  type        = string
  default     = "tern"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,18}$", var.name))
    error_message = "name: lowercase letters, digits and '-', at most 19 characters, starting with a letter (service account ids hold 30)."
  }
}

variable "owner" {
  description = "Value of the `tern-owner` label on the workers (`--owner`); the controller deletes only VMs and slices carrying it."
  type        = string
  default     = "tern"
}

variable "machine_types" {
  description = "Machine types tern offers (`--instance-type`), e.g. [\"a2-highgpu-1g\", \"g2-standard-8\"]; empty: every accelerator type of the zones."
  type        = list(string)
  default     = []
}

variable "team_budgets" {
  description = "Team budgets in USD (`[team.NAME]` of the controller's `--quota` file): a total and/or a rate per hour; cost reports show spend against them."
  type = map(object({
    total_usd    = optional(number)
    per_hour_usd = optional(number)
  }))
  default = {}
}

variable "token_secret_id" {
  description = "Secret Manager secret (id in `project`) holding the API bearer token. The controller reads its latest version at start through its service account (workers use their job's agent token from their VM's tags instead); it never enters Terraform state."
  type        = string
}

variable "state_url_secret_id" {
  description = "Secret Manager secret (id in `project`) holding a PostgreSQL URL for the state (e.g. Cloud SQL); null keeps the state in SQLite on a persistent disk of the controller."
  type        = string
  default     = null
}

variable "tern_binary_url" {
  description = "Where VMs download the `tern` binary (built with `--features gcp`): an `https://` URL or a `gs://bucket/object`."
  type        = string

  validation {
    condition     = can(regex("^(https|gs)://", var.tern_binary_url))
    error_message = "tern_binary_url: an https:// URL or a gs://bucket/object."
  }
}

variable "tern_binary_sha256" {
  description = "SHA-256 of the binary; when set, VMs refuse a download that does not match."
  type        = string
  default     = null
}

variable "enable_apis" {
  description = "Enable the APIs tern calls (Compute, Cloud TPU, Cloud Billing, Secret Manager); they stay enabled after a destroy."
  type        = bool
  default     = true
}

variable "network" {
  description = "VPC network of the controller and the workers."
  type        = string
  default     = "default"
}

variable "subnetwork" {
  description = "Subnetwork in the region; null for an auto-mode network."
  type        = string
  default     = null
}

variable "controller_machine_type" {
  description = "Machine type of the controller VM."
  type        = string
  default     = "e2-small"
}

variable "controller_image" {
  description = "Boot image of the controller VM (it needs bash, curl and python3)."
  type        = string
  default     = "debian-cloud/debian-12"
}

variable "api_port" {
  description = "Port of the controller's HTTP API."
  type        = number
  default     = 8470
}

variable "api_allowed_cidrs" {
  description = "CIDR blocks besides the workers that may reach the API port."
  type        = list(string)
  default     = []
}

variable "enable_iap_tunnel" {
  description = "Let Identity-Aware Proxy reach the API and SSH ports, so `gcloud compute start-iap-tunnel` can forward the API to your machine."
  type        = bool
  default     = true
}

variable "worker_image" {
  description = "Boot image of the training workers (drivers and training stack; it needs bash, curl and python3), e.g. a Deep Learning VM image."
  type        = string
}

variable "worker_disk_size_gb" {
  description = "Boot disk of each worker, in GB."
  type        = number
  default     = 200
}

variable "worker_command" {
  description = "The training command for every job (the words after `tern agent ... --`), overriding each job's own `[run]`; empty (the default): each worker runs its job's `[run]`, so jobs of different teams run their own programs."
  type        = list(string)
  default     = []
}

variable "worker_progress_file" {
  description = "The progress file the training script keeps up to date (`--progress-file`)."
  type        = string
  default     = "/var/lib/tern/progress.json"
}

variable "worker_checkpoint_command" {
  description = "Shell command that writes a checkpoint now (`--checkpoint-command`); null: none."
  type        = string
  default     = null
}

variable "worker_agent_args" {
  description = "Further `tern agent` flags, e.g. [\"--nnodes\", \"1:4\", \"--nproc-per-node\", \"8\"]."
  type        = list(string)
  default     = []
}

variable "labels" {
  description = "Labels on every resource this module creates that takes labels (workers get tern's own)."
  type        = map(string)
  default     = {}
}
