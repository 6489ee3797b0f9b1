//! `aws-smithy-mocks` rules for EC2's read calls, shared by the mocked-client tests: one
//! g4dn.xlarge (T4 ×1) offered in us-east-1a (AZ id use1-az4) with a spot price.

use aws_sdk_ec2::Client;
use aws_sdk_ec2::operation::describe_availability_zones::DescribeAvailabilityZonesOutput;
use aws_sdk_ec2::operation::describe_instance_type_offerings::DescribeInstanceTypeOfferingsOutput;
use aws_sdk_ec2::operation::describe_instance_types::DescribeInstanceTypesOutput;
use aws_sdk_ec2::operation::describe_spot_price_history::DescribeSpotPriceHistoryOutput;
use aws_sdk_ec2::types::{
    AvailabilityZone, GpuDeviceInfo, GpuInfo, InstanceType as Ec2Type, InstanceTypeInfo,
    InstanceTypeOffering, LocationType, SpotPrice, VCpuInfo,
};
use aws_smithy_mocks::{Rule, mock};

/// The spot price the rules report for g4dn.xlarge in us-east-1a.
pub const G4DN_SPOT: f64 = 0.2104;

/// Two zones of us-east-1 with their AZ ids.
pub fn zones_rule() -> Rule {
    mock!(Client::describe_availability_zones).then_output(|| {
        DescribeAvailabilityZonesOutput::builder()
            .availability_zones(
                AvailabilityZone::builder()
                    .zone_name("us-east-1a")
                    .zone_id("use1-az4")
                    .build(),
            )
            .availability_zones(
                AvailabilityZone::builder()
                    .zone_name("us-east-1b")
                    .zone_id("use1-az6")
                    .build(),
            )
            .build()
    })
}

/// DescribeInstanceTypes, DescribeInstanceTypeOfferings and DescribeSpotPriceHistory for
/// g4dn.xlarge in us-east-1a.
pub fn g4dn_rules() -> [Rule; 3] {
    let types = mock!(Client::describe_instance_types).then_output(|| {
        DescribeInstanceTypesOutput::builder()
            .instance_types(
                InstanceTypeInfo::builder()
                    .instance_type(Ec2Type::G4dnXlarge)
                    .v_cpu_info(VCpuInfo::builder().default_v_cpus(4).build())
                    .gpu_info(
                        GpuInfo::builder()
                            .gpus(GpuDeviceInfo::builder().name("T4").count(1).build())
                            .build(),
                    )
                    .build(),
            )
            .build()
    });
    let offerings = mock!(Client::describe_instance_type_offerings).then_output(|| {
        DescribeInstanceTypeOfferingsOutput::builder()
            .instance_type_offerings(
                InstanceTypeOffering::builder()
                    .instance_type(Ec2Type::G4dnXlarge)
                    .location_type(LocationType::AvailabilityZone)
                    .location("us-east-1a")
                    .build(),
            )
            .build()
    });
    let prices = mock!(Client::describe_spot_price_history).then_output(|| {
        DescribeSpotPriceHistoryOutput::builder()
            .spot_price_history(
                SpotPrice::builder()
                    .instance_type(Ec2Type::G4dnXlarge)
                    .availability_zone("us-east-1a")
                    .spot_price(G4DN_SPOT.to_string())
                    .timestamp(aws_smithy_types::DateTime::from_secs(1_795_000_000))
                    .build(),
            )
            .build()
    });
    [types, offerings, prices]
}
