output "controller_url" {
  description = "The API's URL inside the network (the controller's reserved internal address); workers report here."
  value       = local.controller_url
}

output "controller_instance" {
  description = "The controller VM's name."
  value       = google_compute_instance.controller.name
}

output "controller_zone" {
  description = "The controller VM's zone."
  value       = google_compute_instance.controller.zone
}

output "tunnel_command" {
  description = "Forwards the API to localhost through Identity-Aware Proxy (needs enable_iap_tunnel)."
  value       = "gcloud compute start-iap-tunnel ${google_compute_instance.controller.name} ${var.api_port} --local-host-port=localhost:${var.api_port} --zone ${google_compute_instance.controller.zone} --project ${var.project}"
}

output "controller_service_account" {
  description = "The controller's service account (email)."
  value       = google_service_account.controller.email
}

output "worker_service_account" {
  description = "The workers' service account (`--service-account`); grant it data and checkpoint access."
  value       = google_service_account.worker.email
}

output "controller_role_id" {
  description = "The custom role holding tern-gcp's permissions, granted on the project."
  value       = google_project_iam_custom_role.controller.id
}

output "worker_user_role_id" {
  description = "The custom role holding actAs, granted on the workers' service account only."
  value       = google_project_iam_custom_role.worker_user.id
}

output "instance_template" {
  description = "The workers' instance template (`--instance-template`)."
  value       = google_compute_instance_template.workers.self_link
}
