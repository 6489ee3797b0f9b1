output "controller_url" {
  description = "The API inside the network."
  value       = module.tern.controller_url
}

output "tunnel_command" {
  description = "Run it, then talk to the API at http://localhost:8470."
  value       = module.tern.tunnel_command
}

output "worker_service_account" {
  description = "Grant the workers data and checkpoint access here."
  value       = module.tern.worker_service_account
}
