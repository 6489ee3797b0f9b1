output "controller_url" {
  description = "The API's URL inside the VPC (the load balancer with PostgreSQL, else the controller's private address); workers report here."
  value       = local.controller_url
}

output "controller_instance_ids" {
  description = "The controller instances, e.g. for `aws ssm start-session --target`."
  value       = aws_instance.controller[*].id
}

output "controller_private_ips" {
  description = "Private addresses of the controller instances."
  value       = aws_instance.controller[*].private_ip
}

output "port_forward_command" {
  description = "Forwards the API to localhost through the first controller (to the load balancer with PostgreSQL, so it reaches the leader); needs enable_ssm_session and the Session Manager plugin."
  value = local.postgres ? join(" ", [
    "aws ssm start-session --region ${local.region} --target ${aws_instance.controller[0].id}",
    "--document-name AWS-StartPortForwardingSessionToRemoteHost",
    "--parameters host=${aws_lb.api[0].dns_name},portNumber=${var.api_port},localPortNumber=${var.api_port}",
    ]) : join(" ", [
    "aws ssm start-session --region ${local.region} --target ${aws_instance.controller[0].id}",
    "--document-name AWS-StartPortForwardingSession",
    "--parameters portNumber=${var.api_port},localPortNumber=${var.api_port}",
  ])
}

output "controller_role_arn" {
  description = "The controller's IAM role."
  value       = aws_iam_role.controller.arn
}

output "controller_instance_profile" {
  description = "The controller's instance profile, to run a controller elsewhere with the same rights."
  value       = aws_iam_instance_profile.controller.name
}

output "tern_aws_policy_json" {
  description = "The policy holding exactly the IAM actions tern-aws calls."
  value       = data.aws_iam_policy_document.tern_aws.json
}

output "worker_role_arn" {
  description = "The workers' IAM role (attach data and checkpoint access with worker_policy_arns)."
  value       = aws_iam_role.worker.arn
}

output "worker_security_group_id" {
  description = "The workers' security group."
  value       = aws_security_group.workers.id
}

output "launch_template_name" {
  description = "The workers' launch template (`--launch-template`)."
  value       = aws_launch_template.workers.name
}

output "launch_template_id" {
  description = "The workers' launch template id."
  value       = aws_launch_template.workers.id
}

output "queue_url" {
  description = "The interruption queue (`--sqs-queue-url`)."
  value       = aws_sqs_queue.interruptions.url
}

output "queue_arn" {
  description = "The interruption queue's ARN."
  value       = aws_sqs_queue.interruptions.arn
}

output "event_rule_arns" {
  description = "The EventBridge rules feeding the queue, by event shape."
  value = {
    spot_interruption = aws_cloudwatch_event_rule.spot_interruption.arn
    rebalance         = aws_cloudwatch_event_rule.rebalance.arn
    state_change      = aws_cloudwatch_event_rule.state_change.arn
    health            = aws_cloudwatch_event_rule.health.arn
  }
}

output "database_endpoint" {
  description = "The RDS PostgreSQL endpoint (host:port), or null with SQLite."
  value       = local.postgres ? aws_db_instance.state[0].endpoint : null
}

output "database_secret_arn" {
  description = "The Secrets Manager secret RDS keeps the database password in, or null with SQLite."
  value       = local.postgres ? aws_db_instance.state[0].master_user_secret[0].secret_arn : null
}
