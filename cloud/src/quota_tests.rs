//! The quota tables and [`quota_named`] on the messages the clouds send.

use super::*;
use crate::testkit::offer;

fn aws_offer(shape: &str, vcpus: f64, capacity: Capacity) -> Offer {
    let mut o = offer(shape, "use1-az4", capacity)
        .cloud(Cloud::Aws)
        .region("us-east-1")
        .gpus("A100", 8)
        .build();
    o.instance_type.vcpus = vcpus;
    o
}

fn quota_error(code: &str, message: &str) -> ProviderError {
    ProviderError::Quota {
        code: code.into(),
        message: message.into(),
    }
}

/// VcpuLimitExceeded as EC2 sends it (RunInstances and CreateFleet's per-override errors).
const AWS_VCPU: &str = "You have requested more vCPU capacity than your current vCPU limit of 32 \
allows for the instance bucket that the specified instance type belongs to. Please visit \
http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.";

#[test]
fn aws_vcpu_limit_names_the_instance_types_on_demand_bucket() {
    let o = aws_offer("p4d.24xlarge", 96.0, Capacity::OnDemand);
    let q = quota_named(&quota_error("VcpuLimitExceeded", AWS_VCPU), &o).unwrap();
    assert_eq!(q.cloud, Cloud::Aws);
    assert_eq!(q.region, Region::new("us-east-1"));
    assert_eq!(
        q.scope,
        QuotaScope::Vcpus {
            classes: vec!["p".into()]
        }
    );
    assert_eq!(q.capacity, Some(Capacity::OnDemand));
    assert_eq!((q.limit, q.used), (32, None));
    assert_eq!(q.name, "L-417A185B");
    assert_eq!(q.units(&o), 96);

    let g = aws_offer("g4dn.xlarge", 4.0, Capacity::OnDemand);
    let large = AWS_VCPU.replace("of 32 ", "of 1247 ");
    let q = quota_named(&quota_error("VcpuLimitExceeded", &large), &g).unwrap();
    assert_eq!((q.limit, q.name.as_str()), (1247, "L-DB2E81BA"));
    assert_eq!(q.units(&g), 4);
    // The same bucket counts VT instances, not P ones.
    assert_eq!(
        q.units(&aws_offer("vt1.3xlarge", 12.0, Capacity::OnDemand)),
        12
    );
    assert_eq!(q.units(&o), 0);
}

#[test]
fn aws_errors_without_a_number_or_bucket_name_nothing() {
    let o = aws_offer("p3.2xlarge", 8.0, Capacity::Spot);
    let spot = quota_error(
        "MaxSpotInstanceCountExceeded",
        "Max spot instance count exceeded",
    );
    assert_eq!(quota_named(&spot, &o), None);
    // A standard instance is in no accelerator bucket.
    let m5 = aws_offer("m5.large", 2.0, Capacity::OnDemand);
    assert_eq!(
        quota_named(&quota_error("VcpuLimitExceeded", AWS_VCPU), &m5),
        None
    );
    let capacity = ProviderError::Capacity {
        offer: o.key(),
        code: "InsufficientInstanceCapacity".into(),
        message: AWS_VCPU.into(),
    };
    assert_eq!(quota_named(&capacity, &o), None);
}

#[test]
fn instance_classes_and_buckets() {
    for (shape, class, code) in [
        ("p4d.24xlarge", "p", "L-417A185B"),
        ("p5.48xlarge", "p", "L-417A185B"),
        ("g6e.xlarge", "g", "L-DB2E81BA"),
        ("vt1.3xlarge", "vt", "L-DB2E81BA"),
        ("dl1.24xlarge", "dl", "L-6E869C2A"),
        ("dl2q.24xlarge", "dl", "L-6E869C2A"),
        ("inf2.48xlarge", "inf", "L-1945791B"),
        ("trn1n.32xlarge", "trn", "L-2C3B7624"),
    ] {
        assert_eq!(aws_instance_class(shape), class, "{shape}");
        assert_eq!(
            aws_bucket(shape).map(|b| b.on_demand),
            Some(code),
            "{shape}"
        );
    }
    assert_eq!(aws_bucket("c5.large"), None);
    let spot = AWS_ACCELERATOR_BUCKETS[0].quota(&Region::new("us-west-2"), Capacity::Spot, 64);
    assert_eq!(
        (spot.name.as_str(), spot.capacity),
        ("L-7212CCBC", Some(Capacity::Spot))
    );
}

fn gcp_offer(gpu: &str, capacity: Capacity) -> Offer {
    offer("a2-highgpu-1g", "us-central1-a", capacity)
        .cloud(Cloud::Gcp)
        .gpus(gpu, 2)
        .build()
}

/// QUOTA_EXCEEDED inside a finished operation, as GCE words it (two spaces after the stop).
const GCP_T4: &str = "Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 4.0 in region us-central1.";

#[test]
fn gcp_quota_exceeded_names_metric_limit_and_region() {
    let o = gcp_offer("T4", Capacity::OnDemand);
    let q = quota_named(&quota_error("QUOTA_EXCEEDED:NVIDIA_T4_GPUS", GCP_T4), &o).unwrap();
    assert_eq!(
        q,
        CloudQuota {
            cloud: Cloud::Gcp,
            region: Region::new("us-central1"),
            scope: QuotaScope::Model { name: "T4".into() },
            capacity: Some(Capacity::OnDemand),
            limit: 4,
            used: None,
            name: "NVIDIA_T4_GPUS".into(),
        }
    );
    assert_eq!(q.units(&o), 2);
    // A spot VM refused on the standard metric: the project has no preemptible quota, and
    // the standard one limits both.
    let spot = gcp_offer("T4", Capacity::Spot);
    let q = quota_named(&quota_error("QUOTA_EXCEEDED", GCP_T4), &spot).unwrap();
    assert_eq!(q.capacity, None);
    assert_eq!(q.units(&o) + q.units(&spot), 4);
}

#[test]
fn gcp_preemptible_and_model_metrics() {
    let message = "Quota 'PREEMPTIBLE_NVIDIA_A100_80GB_GPUS' exceeded.  Limit: 16.0 in region \
                   europe-west4.";
    let o = gcp_offer("A100-80GB", Capacity::Spot);
    let q = quota_named(&quota_error("QUOTA_EXCEEDED", message), &o).unwrap();
    assert_eq!(
        q.scope,
        QuotaScope::Model {
            name: "A100-80GB".into()
        }
    );
    assert_eq!(q.capacity, Some(Capacity::Spot));
    assert_eq!((q.limit, q.region.as_str()), (16, "europe-west4"));
    // The 80 GB model's quota does not count the 40 GB A100, nor on-demand VMs.
    assert_eq!(q.units(&gcp_offer("A100", Capacity::Spot)), 0);
    assert_eq!(q.units(&gcp_offer("A100-80GB", Capacity::OnDemand)), 0);

    assert_eq!(
        gcp_gpu_metric("NVIDIA_H100_MEGA_GPUS"),
        Some(("H100-MEGA".into(), false))
    );
    assert_eq!(gcp_gpu_metric("NVIDIA_T4_VWS_GPUS"), None);
    assert_eq!(gcp_gpu_metric("COMMITTED_NVIDIA_T4_GPUS"), None);
    assert_eq!(gcp_gpu_metric("CPUS"), None);
    let cpus = "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1.";
    assert_eq!(quota_named(&quota_error("QUOTA_EXCEEDED", cpus), &o), None);
    let no_limit = "Quota 'NVIDIA_T4_GPUS' exceeded.";
    assert_eq!(
        quota_named(&quota_error("QUOTA_EXCEEDED", no_limit), &o),
        None
    );
}

#[test]
fn sim_quota_names_family_and_capacity() {
    let o = offer("p3.2xlarge", "sim-east-1a", Capacity::Spot)
        .gpus("A100-80GB", 4)
        .build();
    let message = "Quota 'sim:A100:spot' exceeded.  Limit: 8 in region sim-east-1.";
    let q = quota_named(&quota_error("QUOTA_EXCEEDED", message), &o).unwrap();
    assert_eq!(
        q.scope,
        QuotaScope::Accelerators {
            family: "A100".into()
        }
    );
    assert_eq!((q.capacity, q.limit), (Some(Capacity::Spot), 8));
    assert_eq!(q.units(&o), 4);
    let any = "Quota 'sim:V100:any' exceeded.  Limit: 2 in region sim-east-1.";
    let q = quota_named(&quota_error("QUOTA_EXCEEDED", any), &o).unwrap();
    assert_eq!(q.capacity, None);
}

#[test]
fn quotas_round_trip_through_json() {
    let q = AWS_ACCELERATOR_BUCKETS[1].quota(&Region::new("us-east-1"), Capacity::OnDemand, 64);
    let text = serde_json::to_string(&q).unwrap();
    assert!(text.contains(r#""kind":"vcpus""#), "{text}");
    assert_eq!(serde_json::from_str::<CloudQuota>(&text).unwrap(), q);
    assert_eq!(q.scope.to_string(), "vCPUs of g/vt instances");
}
