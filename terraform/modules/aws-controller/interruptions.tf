# The interruption queue: one EventBridge rule per event shape tern-aws consumes
# (tern_aws::events::EVENT_SHAPES; tests/terraform_modules.rs compares each pattern with that
# list), all delivering to one SQS queue the controller drains (`--sqs-queue-url`).

resource "aws_sqs_queue" "interruptions" {
  name = "${var.name}-interruptions"
  # A spot warning is worth two minutes; an hour leaves room for a controller restart.
  message_retention_seconds = 3600
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

resource "aws_cloudwatch_event_rule" "spot_interruption" {
  name        = "${var.name}-spot-interruption"
  description = "Spot instance interruption warnings (two minutes' notice) for tern."
  event_pattern = jsonencode({
    "source"      = ["aws.ec2"]
    "detail-type" = ["EC2 Spot Instance Interruption Warning"]
  })
  tags = var.tags
}

resource "aws_cloudwatch_event_rule" "rebalance" {
  name        = "${var.name}-rebalance"
  description = "EC2 instance rebalance recommendations (elevated spot risk) for tern."
  event_pattern = jsonencode({
    "source"      = ["aws.ec2"]
    "detail-type" = ["EC2 Instance Rebalance Recommendation"]
  })
  tags = var.tags
}

resource "aws_cloudwatch_event_rule" "state_change" {
  name        = "${var.name}-state-change"
  description = "EC2 instances going away, for tern."
  event_pattern = jsonencode({
    "source"      = ["aws.ec2"]
    "detail-type" = ["EC2 Instance State-change Notification"]
    "detail" = {
      "state" = ["shutting-down", "terminated", "stopping", "stopped"]
    }
  })
  tags = var.tags
}

resource "aws_cloudwatch_event_rule" "health" {
  name        = "${var.name}-health"
  description = "AWS Health scheduled changes of EC2 instances (retirement, maintenance) for tern."
  event_pattern = jsonencode({
    "source"      = ["aws.health"]
    "detail-type" = ["AWS Health Event"]
    "detail" = {
      "service"           = ["EC2"]
      "eventTypeCategory" = ["scheduledChange"]
    }
  })
  tags = var.tags
}

resource "aws_cloudwatch_event_target" "interruptions" {
  for_each = {
    spot_interruption = aws_cloudwatch_event_rule.spot_interruption.name
    rebalance         = aws_cloudwatch_event_rule.rebalance.name
    state_change      = aws_cloudwatch_event_rule.state_change.name
    health            = aws_cloudwatch_event_rule.health.name
  }
  rule      = each.value
  target_id = "sqs"
  arn       = aws_sqs_queue.interruptions.arn
}

data "aws_iam_policy_document" "interruptions_queue" {
  statement {
    sid       = "EventBridgeRules"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.interruptions.arn]

    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }

    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values = [
        aws_cloudwatch_event_rule.spot_interruption.arn,
        aws_cloudwatch_event_rule.rebalance.arn,
        aws_cloudwatch_event_rule.state_change.arn,
        aws_cloudwatch_event_rule.health.arn,
      ]
    }
  }
}

resource "aws_sqs_queue_policy" "interruptions" {
  queue_url = aws_sqs_queue.interruptions.id
  policy    = data.aws_iam_policy_document.interruptions_queue.json
}
