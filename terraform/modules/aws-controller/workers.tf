# The workers' launch template (`--launch-template`). tern's CreateFleet sets the instance
# type, zone, capacity type and tags of each launch; the template sets everything else and
# pins no subnet. Its user data installs tern and starts `tern agent` for the job named in
# the instance's `tern:job` tag, read from the instance metadata.

data "aws_ami" "worker" {
  owners = ["self", "amazon", "aws-marketplace"]

  filter {
    name   = "image-id"
    values = [var.worker_ami_id]
  }
}

resource "aws_security_group" "workers" {
  name        = "${var.name}-workers"
  description = "tern workers: all traffic between workers (collectives), all egress."
  vpc_id      = data.aws_vpc.default.id
  tags        = var.tags
}

resource "aws_vpc_security_group_ingress_rule" "workers_from_workers" {
  security_group_id            = aws_security_group.workers.id
  referenced_security_group_id = aws_security_group.workers.id
  ip_protocol                  = "-1"
  description                  = "Training traffic between workers"
}

resource "aws_vpc_security_group_egress_rule" "workers_out" {
  security_group_id = aws_security_group.workers.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
  description       = "The controller, data and checkpoints"
}

resource "aws_launch_template" "workers" {
  name                   = "${var.name}-workers"
  description            = "tern workers: tern agent for the job in the tern:job tag."
  image_id               = data.aws_ami.worker.id
  vpc_security_group_ids = [aws_security_group.workers.id]
  # tern launches `$Default`: every change becomes the version it uses.
  update_default_version = true

  iam_instance_profile {
    arn = aws_iam_instance_profile.worker.arn
  }

  metadata_options {
    http_endpoint = "enabled"
    # IMDSv2 only: the agent polls spot/instance-action with a session token.
    http_tokens = "required"
    # Two hops, so a training container can read the metadata too.
    http_put_response_hop_limit = 2
    # The agent reads its job and its agent token from the tern:job and tern:agent-token tags.
    instance_metadata_tags = "enabled"
  }

  block_device_mappings {
    device_name = data.aws_ami.worker.root_device_name

    ebs {
      volume_size           = var.worker_root_volume_gb
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  user_data = base64encode(templatefile("${path.module}/templates/worker-user-data.sh.tftpl", {
    install_tern       = local.install_tern
    controller_url     = local.controller_url
    progress_file      = var.worker_progress_file
    checkpoint_command = local.checkpoint
    agent_args         = local.worker_args
    command            = local.worker_command
  }))

  tags = var.tags
}
