use super::*;
use crate::testkit;

fn opts(catalog: &[Offer]) -> TaskOptions<'_> {
    TaskOptions {
        team: "ml".into(),
        name: None,
        deadline: Some("2d".into()),
        work: Work::Samples(1000),
        cwd: std::env::temp_dir(),
        catalog,
    }
}

fn convert(text: &str) -> Result<Conversion, SpecError> {
    convert_task(text, "train.yaml", &opts(&[]))
}

#[test]
fn the_printed_spec_is_a_spec_and_names_come_from_the_file_when_the_task_has_none() {
    let c = convert("resources:\n  accelerators: a100:2\nrun: python train.py\n").expect("task");
    let spec = crate::parse_job_spec(&c.spec, "x").expect("spec");
    assert_eq!(spec.name, "train");
    assert_eq!(spec.team, "ml");
    assert_eq!(spec.workers.max, 2);
    assert_eq!(spec.constraints.gpus_per_node, Some(2));
    assert_eq!(spec.constraints.capacity, CapacityRule::OnDemandOnly);
    // Spelled as the catalog spells it when there is one.
    let catalog = [
        testkit::offer("p4d.24xlarge", "use1-az1", crate::Capacity::Spot)
            .gpus("A100", 8)
            .build(),
    ];
    let c = convert_task(
        "resources:\n  accelerators: a100:8\nrun: x\n",
        "train.yaml",
        &opts(&catalog),
    )
    .expect("task");
    assert!(c.spec.contains("accelerators = [\"A100\"]"), "{}", c.spec);
}

#[test]
fn aws_zone_names_keep_their_region_with_a_warning_and_gcp_zones_stay() {
    let c =
        convert("resources:\n  accelerators: V100:1\n  infra: aws/us-east-1/us-east-1a\nrun: x\n")
            .expect("task");
    let spec = crate::parse_job_spec(&c.spec, "x").expect("spec");
    assert_eq!(spec.constraints.regions, ["us-east-1"]);
    assert!(spec.constraints.zones.is_empty());
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert_eq!(c.warnings[0].field, "resources.infra");
    assert_eq!(c.warnings[0].at.line, Some(3));
    assert!(c.warnings[0].message.contains("zone id"));
    let c = convert(
        "resources:\n  accelerators: V100:1\n  infra: gcp/us-central1/us-central1-a\nrun: x\n",
    )
    .expect("task");
    let spec = crate::parse_job_spec(&c.spec, "x").expect("spec");
    assert_eq!(spec.constraints.zones, ["us-central1-a"]);
    assert!(c.warnings.is_empty());
}

#[test]
fn alternatives_on_other_clouds_are_left_out_with_a_warning_unless_none_is_left() {
    let text = "resources:\n  accelerators: A100:8\n  any_of:\n    - infra: azure\n    - infra: gcp\nrun: x\n";
    let c = convert(text).expect("task");
    let spec = crate::parse_job_spec(&c.spec, "x").expect("spec");
    assert_eq!(spec.constraints.clouds, [crate::Cloud::Gcp]);
    assert_eq!(c.warnings[0].field, "resources.any_of[0].infra");
    assert!(
        c.warnings[0].message.contains("left out"),
        "{:?}",
        c.warnings
    );
    let e = convert("resources:\n  accelerators: A100:8\n  cloud: lambda\nrun: x\n")
        .expect_err("no cloud left");
    assert!(
        e.to_string()
            .contains("train.yaml:3: `resources.cloud` is not supported"),
        "{e}"
    );
}

#[test]
fn spot_with_fallback_and_mixed_entries_group_into_exact_alternatives() {
    // Spot and on-demand for A100, spot only for V100: two entries (spot for both, on-demand
    // for A100), never one "any" for both, which would allow V100 on demand.
    let text = "resources:\n  any_of:\n    - {accelerators: A100:8, use_spot: true}\n    - \
                {accelerators: A100:8}\n    - {accelerators: V100:8, use_spot: true}\nrun: x\n";
    let c = convert(text).expect("task");
    let spec = crate::parse_job_spec(&c.spec, "x").expect("spec");
    let alts = &spec.constraints.any_of;
    assert_eq!(alts.len(), 2, "{}", c.spec);
    assert!(
        alts.iter().all(|a| a.capacity != CapacityRule::Any),
        "{}",
        c.spec
    );
    let mut got: Vec<(String, bool)> = candidates(&spec)
        .into_iter()
        .map(|c| (c.accelerator.unwrap_or_default(), c.use_spot))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("A100".into(), false),
            ("A100".into(), true),
            ("V100".into(), true)
        ]
    );
}

#[test]
fn errors_name_the_line_and_values_are_never_echoed() {
    let e = convert("resources:\n  accelerators: A100:1\nenvs:\n  TOKEN: [s3cret]\nrun: x\n")
        .expect_err("list value");
    let msg = e.to_string();
    assert!(msg.starts_with("train.yaml:4: `envs.TOKEN`"), "{msg}");
    assert!(!msg.contains("s3cret"), "{msg}");
    let e = convert("resources:\n  accelerators: A100:1\n  use_spot: maybe\nrun: x\n")
        .expect_err("bool");
    assert!(
        e.to_string()
            .contains("train.yaml:3: `resources.use_spot`: expected true or false"),
        "{e}"
    );
    let e = convert("resources: [\nrun: x\n").expect_err("syntax");
    assert!(matches!(e, SpecError::Syntax { .. }), "{e}");
    let e = convert("resources:\n  accelerators: A100:1\n").expect_err("no run");
    assert!(e.to_string().contains("missing field `run`"), "{e}");
    // YAML 1.1 booleans, as PyYAML reads them for SkyPilot.
    let c = convert("resources:\n  accelerators: A100:1\n  use_spot: yes\nrun: x\n").expect("yes");
    assert!(c.spec.contains("capacity = \"spot-only\""), "{}", c.spec);
}

#[test]
fn multi_line_scripts_survive_the_round_trip() {
    let run = "set -e\necho 'quoted' \"double\" \\\\ back\npython train.py --lr 1e-3\n";
    let text = format!(
        "resources:\n  accelerators: A100:1\nrun: |\n{}",
        run.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    let c = convert(&text).expect("task");
    let spec = crate::parse_job_spec(&c.spec, "x").expect("spec");
    assert_eq!(spec.run.expect("run").command, ["bash", "-c", run]);
}

#[test]
fn disk_size_becomes_the_jobs_disk_and_the_largest_of_its_candidates_holds() {
    let c = convert("resources:\n  accelerators: A100:1\n  disk_size: 512\nrun: x\n").expect("int");
    assert!(c.spec.contains("disk_gb = 512"), "{}", c.spec);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let c = convert(
        "resources:\n  accelerators: A100:1\n  disk_size: 256GB\n  any_of:\n    - infra: aws\n    \
         - infra: gcp\n      disk_size: 1TB\nrun: x\n",
    )
    .expect("units");
    let spec = crate::parse_job_spec(&c.spec, "x").expect("spec");
    assert_eq!(spec.disk_gb, Some(1024));
    let w = c
        .warnings
        .iter()
        .find(|w| w.field == "resources.any_of[1].disk_size")
        .unwrap_or_else(|| panic!("{:?}", c.warnings));
    assert_eq!(w.at.line, Some(7));
    assert!(w.message.contains("1024 GB"), "{}", w.message);
    // No disk_size: the template's disk, so no `disk_gb`.
    let c = convert("resources:\n  accelerators: A100:1\nrun: x\n").expect("none");
    assert!(!c.spec.contains("disk_gb"), "{}", c.spec);
    for bad in ["0", "-5", "big", "100+", "99999999"] {
        let e = convert(&format!(
            "resources:\n  accelerators: A100:1\n  disk_size: {bad}\nrun: x\n"
        ))
        .expect_err(bad);
        assert!(
            e.to_string()
                .contains("train.yaml:3: `resources.disk_size`: expected a size in GB"),
            "{bad}: {e}"
        );
    }
}
