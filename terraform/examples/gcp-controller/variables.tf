variable "project" {
  description = "The project tern launches in."
  type        = string
}

variable "region" {
  description = "The home region."
  type        = string
  default     = "us-central1"
}

variable "owner" {
  description = "The tern-owner label value of this deployment's workers."
  type        = string
  default     = "tern-example"
}

variable "token_secret_id" {
  description = "Secret Manager secret holding the API token (create it first)."
  type        = string
  default     = "tern-api-token"
}

variable "tern_binary_url" {
  description = "https:// or gs:// location of a tern binary built with --features gcp."
  type        = string
}

variable "tern_binary_sha256" {
  description = "SHA-256 of that binary (recommended)."
  type        = string
  default     = null
}

variable "worker_image" {
  description = "The workers' boot image, e.g. a Deep Learning VM image family."
  type        = string
  default     = "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"
}
