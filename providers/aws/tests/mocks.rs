//! Error paths moto cannot produce (per-override capacity and quota errors, partial
//! fulfilment, throttling) and EC2's quota values in Service Quotas (moto serves only VPC's),
//! with `aws-smithy-mocks` rules on the real aws-sdk-ec2 and aws-sdk-servicequotas clients.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_ec2::Client;
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::operation::create_fleet::{CreateFleetInput, CreateFleetOutput};
use aws_sdk_ec2::operation::describe_instances::DescribeInstancesOutput;
use aws_sdk_ec2::operation::describe_launch_template_versions::DescribeLaunchTemplateVersionsOutput;
use aws_sdk_ec2::types::{
    CreateFleetError, CreateFleetInstance, DefaultTargetCapacityType, FleetLaunchTemplateOverrides,
    FleetType, Instance as Ec2Instance, InstanceLifecycle, InstanceState as Ec2State,
    InstanceStateName, InstanceType as Ec2Type, LaunchTemplateAndOverridesResponse,
    LaunchTemplateVersion, Placement, Reservation, ResourceType, ResponseLaunchTemplateData,
    SpotAllocationStrategy, Tag,
};
use aws_sdk_servicequotas::Client as Quotas;
use aws_sdk_servicequotas::operation::get_service_quota::{
    GetServiceQuotaError, GetServiceQuotaOutput,
};
use aws_sdk_servicequotas::operation::list_aws_default_service_quotas::ListAwsDefaultServiceQuotasOutput;
use aws_sdk_servicequotas::types::ServiceQuota;
use aws_sdk_servicequotas::types::error::{
    AccessDeniedException as QuotasAccessDenied, NoSuchResourceException,
};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use aws_smithy_types::error::ErrorMetadata;
use tern_aws::{AwsConfig, AwsProvider};
use tern_cloud::{
    Availability, Capacity, Cloud, IdempotencyKey, InstanceId, IntentId, LaunchRequest, Offer,
    Provider, ProviderError, Region, quota_named, tag,
};

mod mocked;

/// No earlier launch with this token.
fn nothing_launched_rule() -> Rule {
    mock!(Client::describe_instances).then_output(|| DescribeInstancesOutput::builder().build())
}

fn offer(instance_type: &str, zone: &str, capacity: Capacity) -> Offer {
    tern_cloud::testkit::offer(instance_type, zone, capacity)
        .cloud(Cloud::Aws)
        .region("us-east-1")
        .gpus("T4", 1)
        .price(1.0)
        .build()
}

fn request(offers: Vec<Offer>, count: u32, single_zone: bool) -> LaunchRequest {
    let intent = IntentId::from_uuid(uuid::Uuid::from_u128(42));
    LaunchRequest {
        key: IdempotencyKey::derive(intent, 0),
        intent,
        job: "job-7".into(),
        offers,
        count,
        min_count: 1,
        single_zone,
        tags: [
            (tag::OWNER.to_owned(), "me".to_owned()),
            (tag::INTENT.to_owned(), intent.to_string()),
            (tag::JOB.to_owned(), "job-7".to_owned()),
        ]
        .into(),
        template: Some("tern-workers".into()),
        disk_gb: None,
    }
}

fn overrides(t: Ec2Type, zone: &str) -> LaunchTemplateAndOverridesResponse {
    LaunchTemplateAndOverridesResponse::builder()
        .overrides(
            FleetLaunchTemplateOverrides::builder()
                .instance_type(t)
                .availability_zone(zone)
                .build(),
        )
        .build()
}

fn provider(ec2: Client) -> AwsProvider {
    AwsProvider::from_clients(AwsConfig::new("us-east-1"), ec2, None).unwrap()
}

#[tokio::test]
async fn partial_fulfilment_reports_launched_instances_and_per_override_capacity_errors() {
    let seen: Arc<Mutex<Vec<CreateFleetInput>>> = Arc::default();
    let record = seen.clone();
    let fleet = mock!(Client::create_fleet).then_compute_output(move |input| {
        record.lock().unwrap().push(input.clone());
        CreateFleetOutput::builder()
            .fleet_id("fleet-0123")
            .instances(
                CreateFleetInstance::builder()
                    .instance_ids("i-0000000000000000b")
                    .lifecycle(InstanceLifecycle::Spot)
                    .instance_type(Ec2Type::G4dnXlarge)
                    .launch_template_and_overrides(overrides(Ec2Type::G4dnXlarge, "us-east-1b"))
                    .build(),
            )
            .errors(
                CreateFleetError::builder()
                    .error_code("InsufficientInstanceCapacity")
                    .error_message("We currently do not have sufficient p3.2xlarge capacity")
                    .lifecycle(InstanceLifecycle::Spot)
                    .launch_template_and_overrides(overrides(Ec2Type::P32xlarge, "us-east-1a"))
                    .build(),
            )
            .errors(
                CreateFleetError::builder()
                    .error_code("MaxSpotInstanceCountExceeded")
                    .error_message("Max spot instance count exceeded")
                    .lifecycle(InstanceLifecycle::Spot)
                    .launch_template_and_overrides(overrides(Ec2Type::G4dnXlarge, "us-east-1b"))
                    .build(),
            )
            .build()
    });
    let ec2 = mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [&mocked::zones_rule(), &nothing_launched_rule(), &fleet]
    );
    let aws = provider(ec2);
    let p3 = offer("p3.2xlarge", "use1-az4", Capacity::Spot);
    let g4 = offer("g4dn.xlarge", "use1-az6", Capacity::Spot);
    let req = request(vec![p3.clone(), g4.clone()], 3, true);
    let out = aws.launch(&req).await.unwrap();

    // Partial: one instance now, on the offer that had capacity.
    assert_eq!(out.instances.len(), 1);
    assert_eq!(out.instances[0].id, InstanceId::from("i-0000000000000000b"));
    assert_eq!(out.instances[0].offer.key(), g4.key());
    assert_eq!(
        out.instances[0].tags.get(tag::JOB).map(String::as_str),
        Some("job-7")
    );
    // Errors per override, classified.
    assert_eq!(out.errors.len(), 2);
    assert_eq!(out.errors[0].0, p3.key());
    assert!(out.errors[0].1.is_capacity(), "{:?}", out.errors[0].1);
    assert_eq!(out.errors[1].0, g4.key());
    assert!(out.errors[1].1.is_quota());

    // The request was the documented CreateFleet shape.
    let inputs = seen.lock().unwrap();
    assert_eq!(inputs.len(), 1);
    let input = &inputs[0];
    assert_eq!(input.r#type(), Some(&FleetType::Instant));
    assert_eq!(
        input.client_token(),
        Some(req.key.aws_client_token().as_str())
    );
    let config = &input.launch_template_configs()[0];
    assert_eq!(
        config
            .launch_template_specification()
            .unwrap()
            .launch_template_name(),
        Some("tern-workers")
    );
    let ov: Vec<_> = config
        .overrides()
        .iter()
        .map(|o| {
            (
                o.instance_type().unwrap().as_str(),
                o.availability_zone().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ov,
        [("p3.2xlarge", "us-east-1a"), ("g4dn.xlarge", "us-east-1b")]
    );
    let target = input.target_capacity_specification().unwrap();
    assert_eq!(target.total_target_capacity(), Some(3));
    assert_eq!(
        target.default_target_capacity_type(),
        Some(&DefaultTargetCapacityType::Spot)
    );
    let spot = input.spot_options().unwrap();
    assert_eq!(
        spot.allocation_strategy(),
        Some(&SpotAllocationStrategy::PriceCapacityOptimized)
    );
    assert_eq!(spot.single_availability_zone(), Some(true));
    assert_eq!(spot.min_target_capacity(), Some(1));
    let kinds: Vec<_> = input
        .tag_specifications()
        .iter()
        .map(|t| t.resource_type().unwrap().clone())
        .collect();
    assert_eq!(kinds, [ResourceType::Instance, ResourceType::Volume]);
    for spec in input.tag_specifications() {
        let owner = spec.tags().iter().find(|t| t.key() == Some(tag::OWNER));
        assert_eq!(owner.and_then(|t| t.value()), Some("me"));
    }
}

#[tokio::test]
async fn a_disk_size_with_a_template_that_names_no_image_is_refused_before_any_fleet() {
    let versions = mock!(Client::describe_launch_template_versions).then_output(|| {
        DescribeLaunchTemplateVersionsOutput::builder()
            .launch_template_versions(
                LaunchTemplateVersion::builder()
                    .launch_template_name("tern-workers")
                    .version_number(3)
                    .launch_template_data(ResponseLaunchTemplateData::builder().build())
                    .build(),
            )
            .build()
    });
    let fleet = mock!(Client::create_fleet).then_output(|| CreateFleetOutput::builder().build());
    let ec2 = mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [
            &mocked::zones_rule(),
            &nothing_launched_rule(),
            &versions,
            &fleet
        ]
    );
    let aws = provider(ec2);
    let mut req = request(
        vec![offer("g4dn.xlarge", "use1-az4", Capacity::Spot)],
        1,
        false,
    );
    req.disk_gb = Some(400);
    let e = aws.launch(&req).await.unwrap_err();
    assert!(matches!(e, ProviderError::InvalidRequest { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("launch template tern-workers version $Default names no ImageId"),
        "{e}"
    );
    assert_eq!(versions.num_calls(), 1);
    assert_eq!(fleet.num_calls(), 0, "nothing launched");
}

#[tokio::test]
async fn a_capacity_error_marks_the_offer_unavailable_for_a_while() {
    let fleet = mock!(Client::create_fleet).then_output(|| {
        CreateFleetOutput::builder()
            .errors(
                CreateFleetError::builder()
                    .error_code("InsufficientInstanceCapacity")
                    .error_message("none left")
                    .launch_template_and_overrides(overrides(Ec2Type::G4dnXlarge, "us-east-1a"))
                    .build(),
            )
            .build()
    });
    let [types, offerings, prices] = mocked::g4dn_rules();
    let ec2 = mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [
            &mocked::zones_rule(),
            &nothing_launched_rule(),
            &fleet,
            &types,
            &offerings,
            &prices
        ]
    );
    let aws = provider(ec2);
    let region = Region::new("us-east-1");
    let before = aws.offers(&region).await.unwrap();
    let spot = before
        .iter()
        .find(|o| o.capacity == Capacity::Spot)
        .unwrap()
        .clone();
    assert_eq!(spot.zone.as_str(), "use1-az4");
    assert_eq!(spot.price_per_hour, mocked::G4DN_SPOT);
    assert_eq!(spot.availability, Availability::Available(None));

    let out = aws
        .launch(&request(vec![spot.clone()], 1, false))
        .await
        .unwrap();
    assert!(out.instances.is_empty());
    assert!(out.errors[0].1.is_capacity());

    let after = aws.offers(&region).await.unwrap();
    let same = after.iter().find(|o| o.key() == spot.key()).unwrap();
    assert_eq!(same.availability, Availability::Unavailable);
    let od = after
        .iter()
        .find(|o| o.capacity == Capacity::OnDemand && o.zone == spot.zone)
        .unwrap();
    assert_eq!(
        od.availability,
        Availability::Available(None),
        "other offers unaffected"
    );
}

const THROTTLED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>5a8b1c3e-0000-4000-8000-000000000000</RequestID></Response>"#;

#[tokio::test]
async fn throttling_is_retried_by_the_sdk_with_the_same_client_token() {
    let tokens: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let record = tokens.clone();
    let fleet = mock!(Client::create_fleet)
        .match_requests(move |input| {
            record
                .lock()
                .unwrap()
                .push(input.client_token().map(str::to_owned));
            true
        })
        .sequence()
        .http_status(503, Some(THROTTLED.into()))
        .times(2)
        .output(|| {
            CreateFleetOutput::builder()
                .instances(
                    CreateFleetInstance::builder()
                        .instance_ids("i-0000000000000000c")
                        .instance_type(Ec2Type::G4dnXlarge)
                        .availability_zone("us-east-1a")
                        .build(),
                )
                .build()
        })
        .build();
    let ec2 = mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [&mocked::zones_rule(), &nothing_launched_rule(), &fleet],
        |c| c.retry_config(
            RetryConfig::standard()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(1))
        )
    );
    let aws = provider(ec2);
    let req = request(
        vec![offer("g4dn.xlarge", "use1-az4", Capacity::OnDemand)],
        1,
        false,
    );
    let out = aws.launch(&req).await.unwrap();
    assert_eq!(out.instances.len(), 1);
    // Two throttled attempts and a good one, all of the one request carrying the token.
    assert_eq!(fleet.num_calls(), 3);
    let tokens = tokens.lock().unwrap();
    let want = Some(req.key.aws_client_token());
    assert!(
        !tokens.is_empty() && tokens.iter().all(|t| *t == want),
        "{tokens:?}"
    );
}

#[tokio::test]
async fn throttling_that_outlasts_the_retries_is_a_throttled_error() {
    let fleet = mock!(Client::create_fleet)
        .sequence()
        .http_status(503, Some(THROTTLED.into()))
        .repeatedly()
        .build();
    let ec2 = mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [&mocked::zones_rule(), &nothing_launched_rule(), &fleet],
        |c| c.retry_config(RetryConfig::standard().with_max_attempts(1))
    );
    let aws = provider(ec2);
    let err = aws
        .launch(&request(
            vec![offer("g4dn.xlarge", "use1-az4", Capacity::Spot)],
            1,
            false,
        ))
        .await
        .unwrap_err();
    assert!(err.is_throttled() && err.is_retryable(), "{err:?}");
}

#[tokio::test]
async fn terminate_counts_an_instance_that_vanished_meanwhile_as_done() {
    let described = mock!(Client::describe_instances).then_output(|| {
        DescribeInstancesOutput::builder()
            .reservations(
                Reservation::builder()
                    .instances(
                        Ec2Instance::builder()
                            .instance_id("i-0000000000000000d")
                            .instance_type(Ec2Type::G4dnXlarge)
                            .placement(Placement::builder().availability_zone("us-east-1a").build())
                            .state(Ec2State::builder().name(InstanceStateName::Running).build())
                            .tags(Tag::builder().key(tag::OWNER).value("me").build())
                            .build(),
                    )
                    .build(),
            )
            .build()
    });
    let gone = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InvalidInstanceID.NotFound</Code><Message>The instance ID 'i-0000000000000000d' does not exist</Message></Error></Errors><RequestID>1</RequestID></Response>"#;
    let terminate = mock!(Client::terminate_instances)
        .sequence()
        .http_status(400, Some(gone.into()))
        .repeatedly()
        .build();
    let ec2 = mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [&mocked::zones_rule(), &described, &terminate]
    );
    let aws = provider(ec2);
    let id = InstanceId::from("i-0000000000000000d");
    let got = aws.get(&id).await.unwrap().unwrap();
    assert_eq!(got.offer.zone.as_str(), "use1-az4");
    aws.terminate(&id).await.unwrap();
    assert_eq!(terminate.num_calls(), 1);
}

#[tokio::test]
async fn a_whole_call_quota_error_is_classified() {
    let body = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>VcpuLimitExceeded</Code><Message>You have requested more vCPU capacity than your current vCPU limit of 32 allows</Message></Error></Errors><RequestID>2</RequestID></Response>"#;
    let fleet = mock!(Client::create_fleet)
        .sequence()
        .http_status(400, Some(body.into()))
        .repeatedly()
        .build();
    let ec2 = mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [&mocked::zones_rule(), &nothing_launched_rule(), &fleet]
    );
    let err = provider(ec2)
        .launch(&request(
            vec![offer("p3.2xlarge", "use1-az4", Capacity::OnDemand)],
            1,
            false,
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Quota { ref code, .. } if code == "VcpuLimitExceeded"));
    // The message names the limit of the bucket p3.2xlarge belongs to: P, on demand.
    let p3 = offer("p3.2xlarge", "use1-az4", Capacity::OnDemand);
    let named = quota_named(&err, &p3).unwrap();
    assert_eq!((named.name.as_str(), named.limit), ("L-417A185B", 32));
    assert_eq!(named.units(&p3), 8, "p3.2xlarge's 8 vCPUs");
}

#[tokio::test]
async fn configured_subnets_replace_the_zone_in_overrides() {
    let seen: Arc<Mutex<Vec<CreateFleetInput>>> = Arc::default();
    let record = seen.clone();
    let fleet = mock!(Client::create_fleet).then_compute_output(move |input| {
        record.lock().unwrap().push(input.clone());
        CreateFleetOutput::builder()
            .instances(
                CreateFleetInstance::builder()
                    .instance_ids("i-0000000000000000e")
                    .instance_type(Ec2Type::G4dnXlarge)
                    .launch_template_and_overrides(
                        LaunchTemplateAndOverridesResponse::builder()
                            .overrides(
                                FleetLaunchTemplateOverrides::builder()
                                    .instance_type(Ec2Type::G4dnXlarge)
                                    .subnet_id("subnet-0bbb")
                                    .build(),
                            )
                            .build(),
                    )
                    .build(),
            )
            .build()
    });
    let ec2 = mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [&mocked::zones_rule(), &nothing_launched_rule(), &fleet]
    );
    let config = AwsConfig {
        subnets: [("use1-az6".to_owned(), "subnet-0bbb".to_owned())].into(),
        ..AwsConfig::new("us-east-1")
    };
    let aws = AwsProvider::from_clients(config, ec2, None).unwrap();
    let a = offer("g4dn.xlarge", "use1-az4", Capacity::OnDemand);
    let b = offer("g4dn.xlarge", "use1-az6", Capacity::OnDemand);
    let out = aws
        .launch(&request(vec![a, b.clone()], 1, false))
        .await
        .unwrap();
    assert_eq!(
        out.instances[0].offer.key(),
        b.key(),
        "mapped back by subnet"
    );

    let inputs = seen.lock().unwrap();
    let ov = inputs[0].launch_template_configs()[0].overrides();
    assert_eq!(
        (ov[0].availability_zone(), ov[0].subnet_id()),
        (Some("us-east-1a"), None)
    );
    assert_eq!(
        (ov[1].availability_zone(), ov[1].subnet_id()),
        (None, Some("subnet-0bbb"))
    );
    // On-demand follows the plan's ranking.
    assert_eq!((ov[0].priority(), ov[1].priority()), (Some(0.0), Some(1.0)));
    let od = inputs[0].on_demand_options().unwrap();
    assert_eq!(
        od.allocation_strategy(),
        Some(&aws_sdk_ec2::types::FleetOnDemandAllocationStrategy::Prioritized)
    );
    assert_eq!(
        od.min_target_capacity(),
        None,
        "only gang (single-zone) launches set a minimum"
    );
}

#[tokio::test]
async fn spot_shortfall_falls_through_to_on_demand_with_a_derived_token() {
    let seen: Arc<Mutex<Vec<CreateFleetInput>>> = Arc::default();
    let record = seen.clone();
    let fleet = mock!(Client::create_fleet).then_compute_output(move |input| {
        record.lock().unwrap().push(input.clone());
        let spot = input
            .target_capacity_specification()
            .and_then(|t| t.default_target_capacity_type())
            == Some(&DefaultTargetCapacityType::Spot);
        let (id, t, zone) = if spot {
            ("i-000000000000000f1", Ec2Type::P32xlarge, "us-east-1a")
        } else {
            ("i-000000000000000f2", Ec2Type::G4dnXlarge, "us-east-1b")
        };
        CreateFleetOutput::builder()
            .instances(
                CreateFleetInstance::builder()
                    .instance_ids(id)
                    .instance_type(t.clone())
                    .launch_template_and_overrides(overrides(t, zone))
                    .build(),
            )
            .build()
    });
    let ec2 = mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [&mocked::zones_rule(), &nothing_launched_rule(), &fleet]
    );
    let aws = provider(ec2);
    let spot = offer("p3.2xlarge", "use1-az4", Capacity::Spot);
    let od = offer("g4dn.xlarge", "use1-az6", Capacity::OnDemand);
    let req = request(vec![spot.clone(), od.clone()], 2, false);
    let out = aws.launch(&req).await.unwrap();
    let keys: Vec<_> = out.instances.iter().map(|i| i.offer.key()).collect();
    assert_eq!(keys, [spot.key(), od.key()]);

    let inputs = seen.lock().unwrap();
    assert_eq!(inputs.len(), 2, "one fleet per capacity type");
    let token = req.key.aws_client_token();
    assert_eq!(inputs[0].client_token(), Some(token.as_str()));
    assert_eq!(
        inputs[1].client_token(),
        Some(format!("{token}-1").as_str())
    );
    // Both fleets' instances carry the launch's token, so a retry after a crash finds both.
    for input in inputs.iter() {
        let launch = input.tag_specifications()[0]
            .tags()
            .iter()
            .find(|t| t.key() == Some(tern_aws::LAUNCH_TAG))
            .and_then(|t| t.value());
        assert_eq!(launch, Some(token.as_str()));
    }
    assert!(
        out.instances
            .iter()
            .all(|i| i.tags.get(tern_aws::LAUNCH_TAG) == Some(&token))
    );
    let remaining = inputs[1]
        .target_capacity_specification()
        .and_then(|t| t.total_target_capacity());
    assert_eq!(remaining, Some(1), "only what spot did not fill");
}

/// A Service Quotas quota as the API returns it.
fn sq_quota(code: &str, value: f64) -> ServiceQuota {
    ServiceQuota::builder()
        .service_code("ec2")
        .quota_code(code)
        .value(value)
        .build()
}

/// What AWS answers for a quota the account never changed, with its code on the wire.
fn no_applied_value() -> GetServiceQuotaError {
    GetServiceQuotaError::NoSuchResourceException(
        NoSuchResourceException::builder()
            .message("The request failed because the specified service quota does not exist.")
            .meta(
                ErrorMetadata::builder()
                    .code("NoSuchResourceException")
                    .build(),
            )
            .build(),
    )
}

#[tokio::test]
async fn quotas_are_the_applied_values_else_the_listed_defaults() {
    let applied = |code: &'static str, value: f64| {
        mock!(Quotas::get_service_quota)
            .match_requests(move |r| r.quota_code() == Some(code))
            .then_output(move || {
                GetServiceQuotaOutput::builder()
                    .quota(sq_quota(code, value))
                    .build()
            })
    };
    let p = applied("L-417A185B", 384.0);
    let g = applied("L-DB2E81BA", 64.0);
    let unchanged = mock!(Quotas::get_service_quota).then_error(no_applied_value);
    let first = mock!(Quotas::list_aws_default_service_quotas)
        .match_requests(|r| r.next_token().is_none() && r.service_code() == Some("ec2"))
        .then_output(|| {
            ListAwsDefaultServiceQuotasOutput::builder()
                .quotas(sq_quota("L-1216C47A", 5.0))
                .quotas(sq_quota("L-7212CCBC", 0.0))
                .quotas(sq_quota("L-3819A6DF", 8.0))
                .next_token("page-2")
                .build()
        });
    let second = mock!(Quotas::list_aws_default_service_quotas)
        .match_requests(|r| r.next_token() == Some("page-2"))
        .then_output(|| {
            ListAwsDefaultServiceQuotasOutput::builder()
                .quotas(sq_quota("L-1945791B", 16.0))
                .build()
        });
    let client = mock_client!(
        aws_sdk_servicequotas,
        RuleMode::MatchAny,
        [&p, &g, &unchanged, &first, &second]
    );
    let aws = provider(mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [&mocked::zones_rule()]
    ))
    .with_quotas_client(client);
    let region = Region::new("us-east-1");
    let read = aws.quotas(&region).await.unwrap();
    let mut got: Vec<(&str, Option<Capacity>, u32)> = read
        .iter()
        .map(|q| (q.name.as_str(), q.capacity, q.limit))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("L-1945791B", Some(Capacity::OnDemand), 16),
            ("L-3819A6DF", Some(Capacity::Spot), 8),
            ("L-417A185B", Some(Capacity::OnDemand), 384),
            ("L-7212CCBC", Some(Capacity::Spot), 0),
            ("L-DB2E81BA", Some(Capacity::OnDemand), 64),
        ],
        "applied values first, defaults else, the standard bucket and unknown codes left out"
    );
    assert!(
        read.iter()
            .all(|q| q.cloud == Cloud::Aws && q.region == region && q.used.is_none())
    );
    let g4dn = offer("g4dn.xlarge", "use1-az4", Capacity::OnDemand);
    let g_quota = read.iter().find(|q| q.name == "L-DB2E81BA").unwrap();
    assert_eq!(g_quota.units(&g4dn), 8);
    assert_eq!(
        (first.num_calls(), second.num_calls()),
        (1, 1),
        "one listing for all"
    );
    // Within the reading's lifetime nothing is asked again.
    let calls = p.num_calls() + unchanged.num_calls();
    assert_eq!(aws.quotas(&region).await.unwrap(), read);
    assert_eq!(p.num_calls() + unchanged.num_calls(), calls);
}

#[tokio::test]
async fn a_denied_quota_read_is_unauthorized_and_no_client_reads_none() {
    let denied = mock!(Quotas::get_service_quota).then_error(|| {
        GetServiceQuotaError::AccessDeniedException(
            QuotasAccessDenied::builder()
                .message("not authorized to perform: servicequotas:GetServiceQuota")
                .meta(
                    ErrorMetadata::builder()
                        .code("AccessDeniedException")
                        .build(),
                )
                .build(),
        )
    });
    let ec2 = || mock_client!(aws_sdk_ec2, RuleMode::MatchAny, [&mocked::zones_rule()]);
    let client = mock_client!(aws_sdk_servicequotas, RuleMode::MatchAny, [&denied]);
    let region = Region::new("us-east-1");
    let err = provider(ec2())
        .with_quotas_client(client)
        .quotas(&region)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
    assert_eq!(provider(ec2()).quotas(&region).await.unwrap(), []);
}
