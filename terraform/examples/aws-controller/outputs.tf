output "controller_url" {
  description = "The API inside the VPC."
  value       = module.tern.controller_url
}

output "port_forward_command" {
  description = "Run it, then talk to the API at http://localhost:8470."
  value       = module.tern.port_forward_command
}

output "controller_instance_ids" {
  description = "The controller instances."
  value       = module.tern.controller_instance_ids
}

output "launch_template_name" {
  description = "The workers' launch template."
  value       = module.tern.launch_template_name
}

output "queue_url" {
  description = "The interruption queue."
  value       = module.tern.queue_url
}

output "worker_role_arn" {
  description = "Grant the workers data and checkpoint access here."
  value       = module.tern.worker_role_arn
}
