terraform {
  # Optional object attributes with defaults (team budgets) need 1.3.
  required_version = ">= 1.3"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 5.0"
    }
  }
}
