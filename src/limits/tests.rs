use super::*;
use tern_cloud::testkit::offer;
use tern_cloud::{Capacity, Cloud};
use tern_plan::QuotaUnit;

const FILE: &str = r#"
fairness = 0.5

[[quota]]
cloud = "aws"
family = "A100"
capacity = "spot"
limit = 16

[[quota]]
cloud = "aws"
family = "p"
unit = "vcpus"
limit = 192

[team.nlp]
total_usd = 100
on_exhausted = "drain"

[team.vision]
per_hour_usd = 20
share = 2
"#;

#[test]
fn the_file_reads_into_the_planners_options() {
    let limits = Limits::parse(FILE, "q.toml").unwrap();
    assert_eq!(limits.team["nlp"].on_exhausted, Exhausted::Drain);
    assert_eq!(limits.team["vision"].on_exhausted, Exhausted::Hold);
    let options = limits.plan_options(PlanOptions::default(), None);
    assert_eq!(options.fairness, 0.5);
    assert_eq!(options.quotas.len(), 2);
    assert_eq!(options.quotas[1].unit, QuotaUnit::Vcpus);
    assert_eq!(options.team_budgets["nlp"].total_usd, Some(100.0));
    assert_eq!(options.team_weights["vision"], 2.0);
    // The command line's fairness wins over the file's.
    assert_eq!(
        limits
            .plan_options(PlanOptions::default(), Some(0.0))
            .fairness,
        0.0
    );
}

#[test]
fn a_bad_field_names_the_file_line_and_field() {
    let text = "[team.nlp]\ntotal_usd = 10\non_exhausted = \"pause\"\n";
    let e = Limits::parse(text, "q.toml").unwrap_err().to_string();
    assert!(e.starts_with("q.toml:3: on_exhausted:"), "{e}");
    assert!(e.contains("hold") && e.contains("drain"), "{e}");
    let text = "[team.nlp]\nshare = 0\n";
    let e = Limits::parse(text, "q.toml").unwrap_err().to_string();
    assert_eq!(e, "q.toml:1: team.nlp.share: expected a weight > 0, got 0");
    let e = Limits::parse("fairness = -1\n", "q.toml")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("q.toml:1: fairness:"), "{e}");
    let e = Limits::parse(
        "[[quota]]\ncloud = \"aws\"\nfamily = \"T4\"\nlimt = 3\n",
        "q.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("q.toml:4: limt: unknown field"), "{e}");
}

#[test]
fn quotas_count_accelerators_or_the_vcpus_of_instance_classes() {
    let limits = Limits::parse(FILE, "q.toml").unwrap();
    let aws = |shape: &str, capacity, gpu: &str, n| {
        offer(shape, "us-east-1a", capacity)
            .gpus(gpu, n)
            .cloud(Cloud::Aws)
            .build()
    };
    let a100 = aws("p4d.24xlarge", Capacity::Spot, "A100", 8);
    let on_demand = aws("p4d.24xlarge", Capacity::OnDemand, "A100", 8);
    let g5 = aws("g5.xlarge", Capacity::Spot, "A10G", 1);
    let (gpus, vcpus) = (&limits.quota[0], &limits.quota[1]);
    assert_eq!(gpus.per_node(&a100), Some(8));
    assert_eq!(gpus.per_node(&on_demand), None, "a spot quota");
    assert_eq!(
        vcpus.per_node(&a100),
        Some(a100.instance_type.vcpus.ceil() as u32)
    );
    assert_eq!(vcpus.per_node(&g5), None, "g is not p");
    let gcp = offer("a2-highgpu-1g", "us-central1-a", Capacity::Spot)
        .gpus("A100", 1)
        .cloud(Cloud::Gcp)
        .build();
    assert_eq!(gpus.per_node(&gcp), None, "another cloud");
    assert!(
        limits
            .check_against(std::slice::from_ref(&a100), "q.toml")
            .is_ok()
    );
    let e = limits
        .check_against(&[g5], "q.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("q.toml: quota[0].family: no aws offer"),
        "{e}"
    );
}
