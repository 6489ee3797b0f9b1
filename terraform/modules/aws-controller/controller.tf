# The controller: `controller_count` instances running `tern controller --provider aws`
# under systemd. With SQLite there is one, reached at its private address, its state on an
# EBS volume of its own (state.tf); with PostgreSQL the standbys wait on the leader's lease
# without listening, so an internal network load balancer whose health check is the API
# port sends every request to the leader. A change of the user data replaces the instances:
# the state is elsewhere in both cases.

locals {
  install_tern = templatefile("${path.module}/templates/install-tern.sh.tftpl", {
    binary_url    = var.tern_binary_url
    binary_sha256 = var.tern_binary_sha256 == null ? "" : var.tern_binary_sha256
  })

  controller_user_data = templatefile("${path.module}/templates/controller-user-data.sh.tftpl", {
    install_tern    = local.install_tern
    region          = local.region
    extra_regions   = var.extra_regions
    instance_types  = var.instance_types
    quota_toml      = local.quota_toml
    postgres        = local.postgres
    db_secret_arn   = local.postgres ? aws_db_instance.state[0].master_user_secret[0].secret_arn : ""
    db_address      = local.postgres ? aws_db_instance.state[0].address : ""
    db_port         = local.postgres ? aws_db_instance.state[0].port : 0
    db_name         = local.postgres ? aws_db_instance.state[0].db_name : ""
    state_volume_id = local.postgres ? "" : aws_ebs_volume.state[0].id
    token_parameter = var.token_parameter_name
    # By name, not by reference: the template's user data names the controller's address.
    launch_template = "${var.name}-workers"
    queue_url       = aws_sqs_queue.interruptions.url
    owner           = var.owner
    api_port        = var.api_port
  })
}

resource "aws_security_group" "controller" {
  name        = "${var.name}-controller"
  description = "tern controller: the API from the VPC and api_allowed_cidrs, all egress."
  vpc_id      = data.aws_vpc.default.id
  tags        = var.tags
}

resource "aws_vpc_security_group_ingress_rule" "controller_api" {
  for_each          = toset(concat([data.aws_vpc.default.cidr_block], var.api_allowed_cidrs))
  security_group_id = aws_security_group.controller.id
  cidr_ipv4         = each.value
  from_port         = var.api_port
  to_port           = var.api_port
  ip_protocol       = "tcp"
  description       = "tern API (workers, clients, the load balancer's health checks)"
}

resource "aws_vpc_security_group_egress_rule" "controller_out" {
  security_group_id = aws_security_group.controller.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
  description       = "AWS APIs, the database, the binary download"
}

resource "aws_instance" "controller" {
  count                  = var.controller_count
  ami                    = var.controller_ami_id != null ? var.controller_ami_id : nonsensitive(data.aws_ssm_parameter.al2023[0].value)
  instance_type          = var.controller_instance_type
  subnet_id              = local.subnet_ids[count.index % length(local.subnet_ids)]
  vpc_security_group_ids = [aws_security_group.controller.id]
  iam_instance_profile   = aws_iam_instance_profile.controller.name
  user_data              = local.controller_user_data
  # cloud-init runs user data at first boot only: a new configuration needs a new instance.
  user_data_replace_on_change = true

  metadata_options {
    http_endpoint = "enabled"
    http_tokens   = "required"
  }

  root_block_device {
    volume_type = "gp3"
    volume_size = 20
    encrypted   = true
  }

  tags = merge(var.tags, { Name = "${var.name}-controller-${count.index}" })

  lifecycle {
    # A new Amazon Linux release must not replace the controller (and its SQLite state).
    ignore_changes = [ami]

    precondition {
      condition     = var.controller_count == 1 || local.postgres
      error_message = "controller_count > 1 needs state_backend = \"postgres\": a SQLite file serves one controller."
    }

    precondition {
      condition = alltrue([
        for t in var.instance_types : contains(var.allowed_instance_families, split(".", t)[0])
      ])
      error_message = "Every entry of instance_types must belong to allowed_instance_families (the IAM policy denies the others)."
    }
  }
}

resource "aws_lb" "api" {
  count              = local.postgres ? 1 : 0
  name               = "${var.name}-api"
  internal           = true
  load_balancer_type = "network"
  subnets            = local.subnet_ids
  tags               = var.tags
}

resource "aws_lb_target_group" "api" {
  count       = local.postgres ? 1 : 0
  name        = "${var.name}-api"
  port        = var.api_port
  protocol    = "TCP"
  vpc_id      = data.aws_vpc.default.id
  target_type = "instance"
  # The port forward runs on a controller, which may itself be the leader: with the client's
  # address kept, a target's connection to itself through the balancer would fail.
  preserve_client_ip = false

  health_check {
    protocol            = "TCP"
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }

  tags = var.tags
}

resource "aws_lb_listener" "api" {
  count             = local.postgres ? 1 : 0
  load_balancer_arn = aws_lb.api[0].arn
  port              = var.api_port
  protocol          = "TCP"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.api[0].arn
  }
}

resource "aws_lb_target_group_attachment" "api" {
  count            = local.postgres ? var.controller_count : 0
  target_group_arn = aws_lb_target_group.api[0].arn
  target_id        = aws_instance.controller[count.index].id
  port             = var.api_port
}
