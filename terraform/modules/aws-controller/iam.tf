# The controller's role holds two policies:
# - `tern_aws`: exactly the IAM actions tern-aws calls (tern_aws::permissions::ACTIONS; the
#   test tests/terraform_modules.rs compares this document's Allow statements with that
#   list), each scoped as tightly as EC2 allows;
# - `controller_boot`: what the instance itself needs to start tern (the token parameter,
#   the database password, the binary), kept apart so the first stays exact.
# The workers' role may only fetch the binary, plus `worker_policy_arns`: a worker's API token
# is its job's agent token, from its own tern:agent-token tag, never the admin token.

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "tern_aws" {
  statement {
    sid = "Read"
    actions = [
      "ec2:DescribeAvailabilityZones",
      "ec2:DescribeInstanceTypes",
      "ec2:DescribeInstanceTypeOfferings",
      "ec2:DescribeSpotPriceHistory",
      "ec2:DescribeInstances",
      "ec2:DescribeLaunchTemplateVersions",
      "ec2:DescribeImages",
      "pricing:GetProducts",
      "servicequotas:GetServiceQuota",
      "servicequotas:ListAWSDefaultServiceQuotas",
    ]
    resources = ["*"]
  }

  statement {
    sid       = "Launch"
    actions   = ["ec2:CreateFleet", "ec2:RunInstances"]
    resources = ["*"]
  }

  # The allowed families as a guard: no other instance type can be launched.
  statement {
    sid       = "OnlyAllowedInstanceFamilies"
    effect    = "Deny"
    actions   = ["ec2:RunInstances"]
    resources = ["arn:${local.partition}:ec2:*:${local.account}:instance/*"]

    condition {
      test     = "StringNotLike"
      variable = "ec2:InstanceType"
      values   = [for f in var.allowed_instance_families : "${f}.*"]
    }
  }

  # Tags only on resources being created: the controller cannot put its owner tag on an
  # existing instance to gain the right to terminate it.
  statement {
    sid     = "TagOnlyAtLaunch"
    actions = ["ec2:CreateTags"]
    resources = [
      "arn:${local.partition}:ec2:*:${local.account}:instance/*",
      "arn:${local.partition}:ec2:*:${local.account}:volume/*",
    ]

    condition {
      test     = "StringEquals"
      variable = "ec2:CreateAction"
      values   = ["CreateFleet", "RunInstances"]
    }
  }

  statement {
    sid       = "TerminateOnlyOwnedInstances"
    actions   = ["ec2:TerminateInstances"]
    resources = ["arn:${local.partition}:ec2:*:${local.account}:instance/*"]

    condition {
      test     = "StringEquals"
      variable = "ec2:ResourceTag/tern:owner"
      values   = [var.owner]
    }
  }

  statement {
    sid       = "PassOnlyTheWorkerRole"
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.worker.arn]

    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["ec2.amazonaws.com"]
    }
  }

  statement {
    sid       = "FleetAndSpotServiceLinkedRoles"
    actions   = ["iam:CreateServiceLinkedRole"]
    resources = ["*"]

    condition {
      test     = "StringEquals"
      variable = "iam:AWSServiceName"
      values   = ["ec2fleet.amazonaws.com", "spot.amazonaws.com"]
    }
  }

  statement {
    sid       = "InterruptionQueue"
    actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage"]
    resources = [aws_sqs_queue.interruptions.arn]
  }
}

data "aws_iam_policy_document" "controller_boot" {
  statement {
    sid       = "ReadApiToken"
    actions   = ["ssm:GetParameter"]
    resources = [local.token_parameter_arn]
  }

  dynamic "statement" {
    for_each = var.token_kms_key_arn == null ? [] : [var.token_kms_key_arn]
    content {
      sid       = "DecryptApiToken"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = local.postgres ? [aws_db_instance.state[0].master_user_secret[0].secret_arn] : []
    content {
      sid       = "ReadDatabasePassword"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = local.binary_object_arn == null ? [] : [local.binary_object_arn]
    content {
      sid       = "FetchTernBinary"
      actions   = ["s3:GetObject"]
      resources = [statement.value]
    }
  }
}

data "aws_iam_policy_document" "worker_boot" {
  dynamic "statement" {
    for_each = local.binary_object_arn == null ? [] : [local.binary_object_arn]
    content {
      sid       = "FetchTernBinary"
      actions   = ["s3:GetObject"]
      resources = [statement.value]
    }
  }
}

resource "aws_iam_role" "controller" {
  name               = "${var.name}-controller"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy" "tern_aws" {
  name   = "tern-aws"
  role   = aws_iam_role.controller.id
  policy = data.aws_iam_policy_document.tern_aws.json
}

resource "aws_iam_role_policy" "controller_boot" {
  name   = "controller-boot"
  role   = aws_iam_role.controller.id
  policy = data.aws_iam_policy_document.controller_boot.json
}

resource "aws_iam_role_policy_attachment" "controller_ssm_session" {
  count      = var.enable_ssm_session ? 1 : 0
  role       = aws_iam_role.controller.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "controller" {
  name = "${var.name}-controller"
  role = aws_iam_role.controller.name
  tags = var.tags
}

resource "aws_iam_role" "worker" {
  name               = "${var.name}-worker"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
  tags               = var.tags
}

# Only when there is something to grant: IAM refuses a policy without statements.
resource "aws_iam_role_policy" "worker_boot" {
  count  = local.binary_object_arn == null ? 0 : 1
  name   = "worker-boot"
  role   = aws_iam_role.worker.id
  policy = data.aws_iam_policy_document.worker_boot.json
}

resource "aws_iam_role_policy_attachment" "worker_extra" {
  count      = length(var.worker_policy_arns)
  role       = aws_iam_role.worker.name
  policy_arn = var.worker_policy_arns[count.index]
}

resource "aws_iam_instance_profile" "worker" {
  name = "${var.name}-worker"
  role = aws_iam_role.worker.name
  tags = var.tags
}
