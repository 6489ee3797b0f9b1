# Shared lookups and values. The other files hold one concept each: iam.tf (roles and
# policies), interruptions.tf (SQS and EventBridge), workers.tf (launch template),
# controller.tf (the controller instances), state.tf (the state volume, or RDS for HA).

data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

data "aws_region" "current" {}

# tern launches workers by availability zone into the default subnets (it has no subnet
# mapping flag yet), so the workers, and the controllers that they report to, live in the
# default VPC.
data "aws_vpc" "default" {
  default = true
}

data "aws_subnets" "default" {
  filter {
    name   = "vpc-id"
    values = [data.aws_vpc.default.id]
  }

  filter {
    name   = "default-for-az"
    values = ["true"]
  }
}

data "aws_ssm_parameter" "al2023" {
  count = var.controller_ami_id == null ? 1 : 0
  name  = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
}

locals {
  region     = data.aws_region.current.id
  account    = data.aws_caller_identity.current.account_id
  partition  = data.aws_partition.current.partition
  subnet_ids = length(var.controller_subnet_ids) > 0 ? var.controller_subnet_ids : sort(data.aws_subnets.default.ids)
  postgres   = var.state_backend == "postgres"

  token_parameter_arn = "arn:${local.partition}:ssm:${local.region}:${local.account}:parameter/${trimprefix(var.token_parameter_name, "/")}"

  # An s3:// binary is read through the instance roles; an https:// one needs no permission.
  binary_object_arn = startswith(var.tern_binary_url, "s3://") ? "arn:${local.partition}:s3:::${trimprefix(var.tern_binary_url, "s3://")}" : null

  # The controller's `--quota` file: team budgets only.
  quota_toml = join("\n", flatten([
    for team, b in var.team_budgets : concat(
      ["[team.\"${team}\"]"],
      b.total_usd == null ? [] : ["total_usd = ${b.total_usd}"],
      b.per_hour_usd == null ? [] : ["per_hour_usd = ${b.per_hour_usd}"],
      [""],
    )
  ]))

  # Shell words, each in single quotes, for the generated scripts.
  worker_command = join(" ", [for w in var.worker_command : "'${replace(w, "'", "'\\''")}'"])
  worker_args    = join(" ", [for w in var.worker_agent_args : "'${replace(w, "'", "'\\''")}'"])
  checkpoint     = var.worker_checkpoint_command == null ? "" : "'${replace(var.worker_checkpoint_command, "'", "'\\''")}'"

  controller_url = local.postgres ? "http://${aws_lb.api[0].dns_name}:${var.api_port}" : "http://${aws_instance.controller[0].private_ip}:${var.api_port}"
}
