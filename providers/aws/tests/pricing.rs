//! On-demand prices refreshed from the AWS Pricing API, with `aws-smithy-mocks` rules on the
//! real aws-sdk-pricing and aws-sdk-ec2 clients. moto has no Pricing API, so these are mocks.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_ec2::Client as Ec2;
use aws_sdk_pricing::Client as Pricing;
use aws_sdk_pricing::operation::get_products::{
    GetProductsError, GetProductsInput, GetProductsOutput,
};
use aws_sdk_pricing::types::error::{AccessDeniedException, ThrottlingException};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use tern_aws::{AwsConfig, AwsProvider};
use tern_cloud::{Capacity, Offer, Provider, Region};

mod mocked;

/// The bundled catalog's on-demand price of g4dn.xlarge in us-east-1.
const CATALOG_PRICE: f64 = 0.526;

/// EC2 offers g4dn.xlarge in one zone of us-east-1, with a spot price.
fn ec2() -> Ec2 {
    let [types, offerings, spot] = mocked::g4dn_rules();
    mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [&mocked::zones_rule(), &types, &offerings, &spot]
    )
}

/// One GetProducts `PriceList` entry in the documented shape.
fn product(instance_type: &str, region: &str, usd: &str) -> String {
    serde_json::json!({
        "product": {
            "productFamily": "Compute Instance",
            "sku": "TESTSKU",
            "attributes": {
                "instanceType": instance_type,
                "regionCode": region,
                "operatingSystem": "Linux",
                "tenancy": "Shared",
                "preInstalledSw": "NA",
                "capacitystatus": "Used",
                "marketoption": "OnDemand"
            }
        },
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                "TESTSKU.JRTCKXETXF": {
                    "offerTermCode": "JRTCKXETXF",
                    "priceDimensions": {
                        "TESTSKU.JRTCKXETXF.6YS6EN2CT7": {
                            "unit": "Hrs",
                            "description": "On Demand Linux instance hour",
                            "pricePerUnit": { "USD": usd }
                        }
                    }
                }
            }
        }
    })
    .to_string()
}

fn pricing(rules: &[&Rule]) -> Pricing {
    mock_client!(aws_sdk_pricing, RuleMode::MatchAny, rules.iter().copied())
}

fn config() -> AwsConfig {
    AwsConfig::new("us-east-1")
}

fn on_demand(offers: &[Offer]) -> f64 {
    offers
        .iter()
        .find(|o| o.capacity == Capacity::OnDemand && o.instance_type.name == "g4dn.xlarge")
        .expect("an on-demand g4dn.xlarge offer")
        .price_per_hour
}

fn filter<'a>(input: &'a GetProductsInput, field: &str) -> Option<&'a str> {
    input
        .filters()
        .iter()
        .find(|f| f.field() == field)
        .map(|f| f.value())
}

#[tokio::test]
async fn a_pricing_api_price_replaces_the_catalog_price_until_the_ttl_passes() {
    let seen: Arc<Mutex<Vec<GetProductsInput>>> = Arc::default();
    let record = seen.clone();
    let products = mock!(Pricing::get_products).then_compute_output(move |input| {
        record.lock().unwrap().push(input.clone());
        GetProductsOutput::builder()
            .format_version("aws_v1")
            .price_list(product("g4dn.xlarge", "us-east-1", "0.6010000000"))
            // Another region's price must not leak into us-east-1.
            .price_list(product("g4dn.xlarge", "eu-west-1", "0.5870000000"))
            .build()
    });
    let aws = AwsProvider::from_clients(config(), ec2(), None)
        .unwrap()
        .with_pricing_client(pricing(&[&products]));
    let region = Region::new("us-east-1");

    let offers = aws.offers(&region).await.unwrap();
    assert_eq!(on_demand(&offers), 0.601);
    let spot = offers
        .iter()
        .find(|o| o.capacity == Capacity::Spot)
        .unwrap();
    assert_eq!(
        spot.price_per_hour,
        mocked::G4DN_SPOT,
        "spot prices are EC2's"
    );

    let input = seen.lock().unwrap()[0].clone();
    assert_eq!(input.service_code(), Some("AmazonEC2"));
    assert_eq!(filter(&input, "instanceType"), Some("g4dn.xlarge"));
    assert_eq!(filter(&input, "regionCode"), Some("us-east-1"));
    assert_eq!(filter(&input, "operatingSystem"), Some("Linux"));
    assert_eq!(filter(&input, "tenancy"), Some("Shared"));
    assert_eq!(filter(&input, "preInstalledSw"), Some("NA"));
    assert_eq!(filter(&input, "capacitystatus"), Some("Used"));

    let again = aws.offers(&region).await.unwrap();
    assert_eq!(on_demand(&again), 0.601);
    assert_eq!(
        products.num_calls(),
        1,
        "within on_demand_ttl: no second query"
    );
}

#[tokio::test]
async fn a_failing_pricing_api_keeps_the_catalog_price_and_offers_still_work() {
    let denied = mock!(Pricing::get_products).then_error(|| {
        GetProductsError::AccessDeniedException(
            AccessDeniedException::builder()
                .message("not authorized to perform: pricing:GetProducts")
                .build(),
        )
    });
    let aws = AwsProvider::from_clients(config(), ec2(), None)
        .unwrap()
        .with_pricing_client(pricing(&[&denied]));
    let region = Region::new("us-east-1");
    let offers = aws.offers(&region).await.unwrap();
    assert_eq!(on_demand(&offers), CATALOG_PRICE);
    let again = aws.offers(&region).await.unwrap();
    assert_eq!(on_demand(&again), CATALOG_PRICE);
    assert_eq!(
        denied.num_calls(),
        1,
        "a failure is not retried on every offers() call"
    );
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_last_refreshed_price() {
    let products = mock!(Pricing::get_products)
        .sequence()
        .output(|| {
            GetProductsOutput::builder()
                .price_list(product("g4dn.xlarge", "us-east-1", "0.6010000000"))
                .build()
        })
        .error(|| {
            GetProductsError::ThrottlingException(
                ThrottlingException::builder()
                    .message("Rate exceeded")
                    .build(),
            )
        })
        .repeatedly()
        .build();
    let config = AwsConfig {
        on_demand_ttl: Duration::ZERO,
        ..config()
    };
    let aws = AwsProvider::from_clients(config, ec2(), None)
        .unwrap()
        .with_pricing_client(pricing(&[&products]));
    let region = Region::new("us-east-1");
    assert_eq!(on_demand(&aws.offers(&region).await.unwrap()), 0.601);
    assert_eq!(on_demand(&aws.offers(&region).await.unwrap()), 0.601);
    assert_eq!(on_demand(&aws.offers(&region).await.unwrap()), 0.601);
    assert!(products.num_calls() >= 3, "{}", products.num_calls());
}

#[tokio::test]
async fn get_products_pages_are_followed() {
    let first = mock!(Pricing::get_products)
        .match_requests(|input| input.next_token().is_none())
        .then_output(|| {
            GetProductsOutput::builder()
                .price_list(product("g4dn.xlarge", "eu-west-1", "0.5870000000"))
                .next_token("page-2")
                .build()
        });
    let second = mock!(Pricing::get_products)
        .match_requests(|input| input.next_token() == Some("page-2"))
        .then_output(|| {
            GetProductsOutput::builder()
                .price_list(product("g4dn.xlarge", "us-east-1", "0.6010000000"))
                .build()
        });
    let aws = AwsProvider::from_clients(config(), ec2(), None)
        .unwrap()
        .with_pricing_client(pricing(&[&first, &second]));
    let offers = aws.offers(&Region::new("us-east-1")).await.unwrap();
    assert_eq!(on_demand(&offers), 0.601);
    assert_eq!((first.num_calls(), second.num_calls()), (1, 1));
}

#[tokio::test]
async fn the_pricing_api_can_be_switched_off() {
    let products = mock!(Pricing::get_products).then_output(|| {
        GetProductsOutput::builder()
            .price_list(product("g4dn.xlarge", "us-east-1", "0.6010000000"))
            .build()
    });
    let config = AwsConfig {
        pricing_api: false,
        ..config()
    };
    let aws = AwsProvider::from_clients(config, ec2(), None)
        .unwrap()
        .with_pricing_client(pricing(&[&products]));
    let offers = aws.offers(&Region::new("us-east-1")).await.unwrap();
    assert_eq!(on_demand(&offers), CATALOG_PRICE);
    assert_eq!(products.num_calls(), 0);
}

#[tokio::test]
async fn refreshed_on_demand_prices_are_recorded_in_the_price_history() {
    let products = mock!(Pricing::get_products).then_output(|| {
        GetProductsOutput::builder()
            .format_version("aws_v1")
            .price_list(product("g4dn.xlarge", "us-east-1", "0.6010000000"))
            .build()
    });
    let history = Arc::new(Mutex::new(
        tern_pricing::PriceHistory::open_in_memory().unwrap(),
    ));
    let aws = AwsProvider::from_clients(config(), ec2(), None)
        .unwrap()
        .with_pricing_client(pricing(&[&products]))
        .with_price_history(history.clone());
    aws.offers(&Region::new("us-east-1")).await.unwrap();
    let points = history
        .lock()
        .unwrap()
        .history("g4dn.xlarge", None, Some(Capacity::OnDemand))
        .unwrap();
    assert!(!points.is_empty(), "no on-demand point recorded");
    assert!(
        points.iter().all(|p| p.price_per_hour == 0.601),
        "{points:?}"
    );
    assert!(
        points.iter().all(|p| p.source == "aws:pricing:GetProducts"),
        "{points:?}"
    );
    let spot = history
        .lock()
        .unwrap()
        .history("g4dn.xlarge", None, Some(Capacity::Spot))
        .unwrap();
    assert_eq!(spot.len(), 1, "{spot:?}");
    assert_eq!(spot[0].price_per_hour, mocked::G4DN_SPOT);
}
