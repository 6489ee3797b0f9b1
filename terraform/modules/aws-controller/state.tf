# Where the controller's state lives (`state_backend`):
# - sqlite: a file on an EBS volume of its own, attached to the one controller, so the state
#   outlives a replaced instance;
# - postgres: an RDS PostgreSQL instance shared by every controller (high availability). Its
#   master password is generated and kept by RDS in Secrets Manager, never in Terraform
#   state; the controllers read it at start and connect with TLS, verifying the server.

data "aws_subnet" "first" {
  id = local.subnet_ids[0]
}

resource "aws_ebs_volume" "state" {
  count             = local.postgres ? 0 : 1
  availability_zone = data.aws_subnet.first.availability_zone
  size              = 10
  type              = "gp3"
  encrypted         = true
  tags              = merge(var.tags, { Name = "${var.name}-controller-state" })
}

resource "aws_volume_attachment" "state" {
  count       = local.postgres ? 0 : 1
  device_name = "/dev/sdf"
  volume_id   = aws_ebs_volume.state[0].id
  instance_id = aws_instance.controller[0].id
  # Stop the controller before detaching, so SQLite is closed cleanly.
  stop_instance_before_detaching = true
}

resource "aws_db_subnet_group" "state" {
  count      = local.postgres ? 1 : 0
  name       = "${var.name}-state"
  subnet_ids = local.subnet_ids
  tags       = var.tags
}

resource "aws_security_group" "database" {
  count       = local.postgres ? 1 : 0
  name        = "${var.name}-state"
  description = "tern state store: PostgreSQL from the controllers only."
  vpc_id      = data.aws_vpc.default.id
  tags        = var.tags
}

resource "aws_vpc_security_group_ingress_rule" "database_from_controllers" {
  count                        = local.postgres ? 1 : 0
  security_group_id            = aws_security_group.database[0].id
  referenced_security_group_id = aws_security_group.controller.id
  from_port                    = 5432
  to_port                      = 5432
  ip_protocol                  = "tcp"
  description                  = "PostgreSQL from the tern controllers"
}

resource "aws_db_instance" "state" {
  count                       = local.postgres ? 1 : 0
  identifier                  = "${var.name}-state"
  engine                      = "postgres"
  engine_version              = "16"
  instance_class              = var.db_instance_class
  allocated_storage           = var.db_allocated_storage_gb
  storage_type                = "gp3"
  storage_encrypted           = true
  db_name                     = "tern"
  username                    = "tern"
  manage_master_user_password = true
  multi_az                    = var.db_multi_az
  db_subnet_group_name        = aws_db_subnet_group.state[0].name
  vpc_security_group_ids      = [aws_security_group.database[0].id]
  backup_retention_period     = 7
  deletion_protection         = var.db_deletion_protection
  skip_final_snapshot         = false
  final_snapshot_identifier   = "${var.name}-state-final"
  auto_minor_version_upgrade  = true
  tags                        = var.tags
}
