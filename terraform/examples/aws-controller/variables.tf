variable "region" {
  description = "The home region."
  type        = string
  default     = "us-east-1"
}

variable "owner" {
  description = "The tern:owner tag value of this deployment's workers."
  type        = string
  default     = "tern-example"
}

variable "token_parameter_name" {
  description = "SSM SecureString parameter holding the API token (create it first)."
  type        = string
  default     = "/tern/api-token"
}

variable "tern_binary_url" {
  description = "https:// or s3:// location of a tern binary built with --features aws."
  type        = string
}

variable "tern_binary_sha256" {
  description = "SHA-256 of that binary (recommended)."
  type        = string
  default     = null
}

variable "worker_ami_id" {
  description = "The workers' AMI, e.g. an AWS Deep Learning AMI of the region."
  type        = string
}

variable "state_backend" {
  description = "sqlite (one controller) or postgres (two controllers on RDS)."
  type        = string
  default     = "sqlite"
}
