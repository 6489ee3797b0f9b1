# The home region is the region of the `aws` provider this module is given: the controller,
# its queue, the launch template and the workers live there.

variable "name" {
  description = "Prefix of every resource name (role, queue, rules, launch template, instances)."
  type        = string
  default     = "tern"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}$", var.name))
    error_message = "name: lowercase letters, digits and '-', at most 31 characters, starting with a letter."
  }
}

variable "extra_regions" {
  description = "Further regions whose tern instances the controller also lists and terminates (`--extra-region`)."
  type        = list(string)
  default     = []
}

variable "owner" {
  description = "Value of the `tern:owner` tag on the workers (`--owner`); the controller may terminate only instances carrying it."
  type        = string
  default     = "tern"
}

variable "allowed_instance_families" {
  description = "Instance families the controller may launch (`g5` allows `g5.*`); the IAM policy denies every other type."
  type        = list(string)
  default     = ["g4dn", "g5", "g6", "g6e", "p4d", "p5"]

  validation {
    condition     = length(var.allowed_instance_families) > 0 && alltrue([for f in var.allowed_instance_families : can(regex("^[a-z0-9-]+$", f))])
    error_message = "allowed_instance_families: at least one family, written without the size (g5, not g5.xlarge)."
  }
}

variable "instance_types" {
  description = "Instance types tern offers (`--instance-type`); empty offers every accelerator type of the allowed families the account sells."
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

variable "token_parameter_name" {
  description = "Name of the SSM SecureString parameter holding the API bearer token. The controller reads it at start through its role (workers use their job's agent token from their tags instead); it never enters Terraform state."
  type        = string
}

variable "token_kms_key_arn" {
  description = "The customer-managed KMS key of the token parameter, if it is not encrypted with the default `aws/ssm` key."
  type        = string
  default     = null
}

variable "tern_binary_url" {
  description = "Where instances download the `tern` binary (built with `--features aws`): an `https://` URL or an `s3://bucket/key` object."
  type        = string

  validation {
    condition     = can(regex("^(https|s3)://", var.tern_binary_url))
    error_message = "tern_binary_url: an https:// URL or an s3://bucket/key object."
  }
}

variable "tern_binary_sha256" {
  description = "SHA-256 of the binary; when set, instances refuse a download that does not match."
  type        = string
  default     = null
}

variable "state_backend" {
  description = "`sqlite`: one controller with its state in a file on its disk. `postgres`: an RDS PostgreSQL instance that `controller_count` controllers share for high availability, behind an internal load balancer."
  type        = string
  default     = "sqlite"

  validation {
    condition     = contains(["sqlite", "postgres"], var.state_backend)
    error_message = "state_backend: sqlite or postgres."
  }
}

variable "controller_count" {
  description = "Controller instances; more than one needs `state_backend = \"postgres\"` (one leads, the others wait on its lease)."
  type        = number
  default     = 1

  validation {
    condition     = var.controller_count >= 1
    error_message = "controller_count: at least 1."
  }
}

variable "controller_instance_type" {
  description = "Instance type of the controller."
  type        = string
  default     = "t3.small"
}

variable "controller_ami_id" {
  description = "AMI of the controller; null takes the latest Amazon Linux 2023 (it needs bash, curl, python3 and the AWS CLI)."
  type        = string
  default     = null
}

variable "controller_subnet_ids" {
  description = "Subnets of the controllers (and of the database and load balancer); empty uses the default VPC's default subnets. They must be in the default VPC, where the workers run."
  type        = list(string)
  default     = []
}

variable "api_port" {
  description = "Port of the controller's HTTP API."
  type        = number
  default     = 8470
}

variable "api_allowed_cidrs" {
  description = "CIDR blocks besides the VPC's that may reach the API port."
  type        = list(string)
  default     = []
}

variable "enable_ssm_session" {
  description = "Attach AmazonSSMManagedInstanceCore to the controller role, so `aws ssm start-session` can forward the API port to your machine without opening it."
  type        = bool
  default     = true
}

variable "db_instance_class" {
  description = "RDS instance class (`state_backend = \"postgres\"`)."
  type        = string
  default     = "db.t4g.micro"
}

variable "db_allocated_storage_gb" {
  description = "RDS storage in GiB."
  type        = number
  default     = 20
}

variable "db_multi_az" {
  description = "Run the RDS instance with a standby in a second zone."
  type        = bool
  default     = true
}

variable "db_deletion_protection" {
  description = "Refuse to delete the RDS instance (turn off before `terraform destroy`)."
  type        = bool
  default     = true
}

variable "worker_ami_id" {
  description = "AMI of the training workers (drivers and training stack; it needs bash, curl and the AWS CLI, e.g. an AWS Deep Learning AMI)."
  type        = string
}

variable "worker_root_volume_gb" {
  description = "Root volume of each worker, in GiB."
  type        = number
  default     = 200
}

variable "worker_policy_arns" {
  description = "Further IAM policies for the workers' role (e.g. read and write to the checkpoint bucket)."
  type        = list(string)
  default     = []
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

variable "tags" {
  description = "Tags on every resource this module creates (workers get tern's own tags)."
  type        = map(string)
  default     = {}
}
