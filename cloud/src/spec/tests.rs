use super::*;
use crate::{CapacityRule, Cloud};

const GOOD: &str = r#"
name = "bert-ft"
team = "nlp"
accelerators = ["A100", "H100"]
deadline = "3d 4h"
workers = { min = 2, max = 8 }
gang = true
priority = 3
local_batch = 32

[work]
steps = 1000
batch = 256

[checkpoint]
interval = "30m"
size_gb = 4.5

[budget]
total_usd = 900

[[observation]]
accelerator = "A100"
gpus = 1
local_batch = 32
step_seconds = 0.21
"#;

#[test]
fn parses_a_full_spec() {
    let s = parse_job_spec(GOOD, "job.toml").expect("valid");
    assert_eq!(s.work.samples(), 256_000);
    assert_eq!(
        s.deadline,
        Some(Deadline::AfterSeconds(3 * 86_400 + 4 * 3_600))
    );
    assert_eq!(s.workers, WorkerRange { min: 2, max: 8 });
    assert_eq!(s.checkpoint.interval_s, 1800.0);
    assert_eq!(s.checkpoint.restore_s, CheckpointSpec::default().restore_s);
    assert_eq!(s.observations[0].nodes, 1);
    assert_eq!(s.budget.total_usd, Some(900.0));
}

/// GOOD with `bad` added at the top level is refused with an error that contains `message`.
fn refused_with(bad: &str, message: &str) {
    let text = GOOD.replacen(
        "local_batch = 32\n",
        &format!("local_batch = 32\n{bad}\n"),
        1,
    );
    let e = parse_job_spec(&text, "job.toml")
        .expect_err(bad)
        .to_string();
    assert!(e.contains(message), "{bad}: {e}");
}

#[test]
fn placement_constraints_parse_and_old_specs_have_none() {
    assert!(
        parse_job_spec(GOOD, "job.toml")
            .expect("valid")
            .constraints
            .is_empty()
    );
    let text = GOOD.replacen(
        "local_batch = 32\n",
        "local_batch = 32\nclouds = [\"aws\", \"gcp\"]\nregions = [\"us-*\", \"europe-west4\"]\n\
         exclude = [\"ap-*\", \"p3.*\"]\nmax_price_per_hour = 40\ncapacity = \"spot-only\"\n\
         data = { region = \"us-east-1\", size_gb = 800 }\n",
        1,
    );
    let c = parse_job_spec(&text, "job.toml")
        .expect("valid")
        .constraints;
    assert_eq!(c.clouds, vec![Cloud::Aws, Cloud::Gcp]);
    assert_eq!(c.regions, vec!["us-*", "europe-west4"]);
    assert_eq!(c.exclude, vec!["ap-*", "p3.*"]);
    assert_eq!(c.max_price_per_hour, Some(40.0));
    assert_eq!(c.capacity, CapacityRule::SpotOnly);
    assert_eq!(c.data.as_ref().map(|d| d.size_gb), Some(800.0));
    for (bad, message) in [
        (
            "clouds = [\"azure\"]",
            "job.toml:10: `clouds[0]`: expected a cloud tern runs on",
        ),
        ("regions = []", "`regions`: expected a non-empty array"),
        (
            "zones = [\"us east\"]",
            "`zones[0]`: expected a name or glob",
        ),
        ("capacity = \"spot\"", "`capacity`: expected \"spot-only\""),
        (
            "max_price_per_hour = 0",
            "`max_price_per_hour`: expected an amount > 0",
        ),
        (
            "data = { region = \"us-east-1\" }",
            "missing field `data.size_gb`",
        ),
    ] {
        refused_with(bad, message);
    }
}

#[test]
fn shape_fields_and_alternatives_parse() {
    let text = format!(
        "{}{}",
        GOOD.replacen(
            "local_batch = 32\n",
            "local_batch = 32\ninstance_types = [\"p4d.*\"]\ncpus = \"8+\"\nmemory = 64\n\
             gpus_per_node = 8\n",
            1,
        ),
        "[[any_of]]\nclouds = [\"aws\"]\ncapacity = \"spot-only\"\naccelerators = [\"A100\"]\n\
         [[any_of]]\nclouds = [\"gcp\"]\nregions = [\"us-central1\"]\n",
    );
    let c = parse_job_spec(&text, "job.toml")
        .expect("valid")
        .constraints;
    assert_eq!(c.instance_types, vec!["p4d.*"]);
    assert_eq!(
        c.cpus,
        Some(crate::Amount {
            value: 8.0,
            at_least: true
        })
    );
    assert_eq!(
        c.memory_gib,
        Some(crate::Amount {
            value: 64.0,
            at_least: false
        })
    );
    assert_eq!(c.gpus_per_node, Some(8));
    assert_eq!(c.any_of.len(), 2);
    assert_eq!(c.any_of[0].clouds, vec![Cloud::Aws]);
    assert_eq!(c.any_of[0].capacity, CapacityRule::SpotOnly);
    assert_eq!(c.any_of[0].accelerators, vec!["A100"]);
    assert_eq!(c.any_of[1].regions, vec!["us-central1"]);
    for (bad, message) in [
        ("cpus = \"many\"", "`cpus`: expected a number > 0"),
        ("memory = -4", "`memory`: expected a number > 0"),
        (
            "gpus_per_node = 0",
            "`gpus_per_node`: expected an integer ≥ 1",
        ),
        ("any_of = []", "`any_of`: expected a non-empty array"),
        (
            "any_of = [{ accelerators = [\"T4\"] }]",
            "`any_of[0].accelerators[0]`: expected one of the job's accelerators (A100, H100)",
        ),
        (
            "any_of = [{ data = { region = \"x\", size_gb = 1 } }]",
            "unknown field `any_of[0].data`",
        ),
        (
            "any_of = [{ capacity = \"spot\" }]",
            "`any_of[0].capacity`: expected",
        ),
    ] {
        refused_with(bad, message);
    }
}

#[test]
fn a_boot_disk_size_is_whole_gb_within_what_clouds_make() {
    assert_eq!(
        parse_job_spec(GOOD, "job.toml").expect("spec").disk_gb,
        None
    );
    let text = GOOD.replacen("local_batch = 32\n", "local_batch = 32\ndisk_gb = 500\n", 1);
    let spec = parse_job_spec(&text, "job.toml").expect("spec");
    assert_eq!(spec.disk_gb, Some(500));
    // Stored and read back as it was written.
    let json = serde_json::to_string(&spec).expect("json");
    assert_eq!(serde_json::from_str::<JobSpec>(&json).expect("back"), spec);
    for (bad, message) in [
        (
            "disk_gb = 0",
            "`disk_gb`: expected an integer from 1 to 65536 (GB), found 0",
        ),
        (
            "disk_gb = 70000",
            "`disk_gb`: expected an integer from 1 to 65536 (GB)",
        ),
        ("disk_gb = \"500GB\"", "`disk_gb`: expected"),
        ("disk_gb = 1.5", "`disk_gb`: expected"),
    ] {
        refused_with(bad, message);
    }
}

#[test]
fn deadline_forms() {
    let at = parse_job_spec(
        &GOOD.replace("\"3d 4h\"", "\"2026-12-01T00:00:00Z\""),
        "j.toml",
    )
    .expect("valid");
    let t = DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z")
        .expect("time")
        .with_timezone(&Utc);
    assert_eq!(at.deadline, Some(Deadline::At(t)));
    let rel = Deadline::AfterSeconds(3600);
    assert_eq!(rel.resolve(t), t + chrono::TimeDelta::hours(1));
    assert_eq!(parse_duration("52h"), Some(52 * 3600));
    assert_eq!(parse_duration("1h30m"), Some(5400));
    assert_eq!(parse_duration("3x"), None);
    assert_eq!(parse_duration("12"), None);
}

#[test]
fn errors_name_file_field_line_and_expectation() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "priority = 3",
            "prioritty = 3",
            &["job.toml:8", "unknown field `prioritty`"],
        ),
        (
            "size_gb = 4.5",
            "size_gbs = 4.5",
            &["job.toml:17", "`checkpoint.size_gbs`"],
        ),
        (
            "steps = 1000",
            "steps = 0",
            &["job.toml:12", "`work.steps`", "≥ 1"],
        ),
        (
            "deadline = \"3d 4h\"",
            "deadline = \"soon\"",
            &["job.toml:5", "`deadline`", "\"soon\""],
        ),
        ("max = 8", "max = 1", &["job.toml:6", "min ≤ max"]),
        (
            "gang = true",
            "gang = \"yes\"",
            &["job.toml:7", "true or false"],
        ),
        (
            "step_seconds = 0.21",
            "step_seconds = -1",
            &["job.toml:26", "observation[0].step_seconds"],
        ),
        (
            "\"H100\"]",
            "\"H 100\"]",
            &["job.toml:4", "accelerators[1]"],
        ),
        (
            "name = \"bert-ft\"",
            "name = ",
            &["job.toml:2", "not valid TOML"],
        ),
        (
            "team = \"nlp\"\n",
            "",
            &["job.toml", "missing field `team`"],
        ),
    ];
    for (from, to, wants) in cases {
        assert!(GOOD.contains(from), "{from}");
        let text = GOOD.replacen(from, to, 1);
        let e = parse_job_spec(&text, "job.toml").expect_err(to).to_string();
        for w in *wants {
            assert!(e.contains(w), "{to:?}: {e:?} lacks {w:?}");
        }
    }
}

#[test]
fn names_and_teams_follow_one_rule() {
    let long = format!("name = \"{}\"", "a".repeat(100_000));
    for (from, to, field) in [
        ("name = \"bert-ft\"", long.as_str(), "`name`"),
        ("name = \"bert-ft\"", "name = \"x\\u001b[2J\"", "`name`"),
        ("name = \"bert-ft\"", "name = \"-lead\"", "`name`"),
        ("team = \"nlp\"", "team = \"n l p\"", "`team`"),
        ("team = \"nlp\"", "team = \"\"", "`team`"),
    ] {
        let text = GOOD.replacen(from, to, 1);
        let e = parse_job_spec(&text, "job.toml").expect_err(to).to_string();
        assert!(e.contains(field) && e.contains("1–63 characters"), "{e}");
        assert!(!e.contains('\u{1b}') && e.len() < 400, "{e}");
    }
}

#[test]
fn labels_with_control_characters_are_refused() {
    let text = GOOD.replacen(
        "accelerator = \"A100\"",
        "accelerator = \"A100\\u001b]0;owned\\u0007\"",
        1,
    );
    let e = parse_job_spec(&text, "job.toml")
        .expect_err("escape")
        .to_string();
    assert!(e.contains("observation[0].accelerator"), "{e}");
    assert!(!e.contains('\u{1b}'), "{e}");
}

#[test]
fn deadlines_beyond_ten_years_are_refused() {
    for d in ["\"99999999w\"", "\"3651d\""] {
        let text = GOOD.replacen("\"3d 4h\"", d, 1);
        let e = parse_job_spec(&text, "job.toml").expect_err(d).to_string();
        assert!(e.contains("`deadline`") && e.contains("10 years"), "{e}");
    }
    let text = GOOD.replacen("\"3d 4h\"", "\"3650d\"", 1);
    assert!(parse_job_spec(&text, "job.toml").is_ok());
}

#[test]
fn profiles_are_a_path_or_inline_text() {
    let with = |body: &str| format!("{GOOD}\n[profile]\naccelerator = \"V100\"\n{body}\n");
    let p = parse_job_spec(&with("path = \"prof\""), "j.toml").expect("path");
    let p = p.profile.expect("profile");
    assert_eq!(p.path.as_deref(), Some("prof"));
    let csv = "placements = \"\"\"\na,b\n1,2\n\"\"\"";
    let p = parse_job_spec(&with(csv), "j.toml").expect("inline");
    let p = p.profile.expect("profile");
    assert_eq!(
        (p.path, p.placements.as_deref()),
        (None, Some("a,b\n1,2\n"))
    );
    let e = parse_job_spec(&with(&format!("path = \"p\"\n{csv}")), "j.toml")
        .expect_err("both")
        .to_string();
    assert!(e.contains("profile.path") && e.contains("both"), "{e}");
    let e = parse_job_spec(&with(""), "j.toml").expect_err("neither");
    assert!(
        e.to_string().contains("missing field `profile.path`"),
        "{e}"
    );
}

/// 15,000 `[[observation]]` entries took 18 s when every key's line was found by scanning
/// the text from the start; with the line index the parse is linear.
#[test]
fn many_observations_parse_in_linear_time() {
    let entry = "[[observation]]\naccelerator = \"A100\"\ngpus = 1\nlocal_batch = 32\nstep_seconds = 0.21\n";
    let text = format!("{GOOD}{}", entry.repeat(30_000));
    let started = std::time::Instant::now();
    let s = parse_job_spec(&text, "big.toml").expect("valid");
    assert_eq!(s.observations.len(), 30_001);
    let took = started.elapsed();
    assert!(
        took.as_secs_f64() < 10.0,
        "30,000 observations took {took:?}"
    );
    // An error on the last entry still names its line.
    let bad = format!("{text}[[observation]]\ngpus = 1\n");
    let e = parse_job_spec(&bad, "big.toml")
        .expect_err("missing")
        .to_string();
    let last = bad.lines().count() - 1;
    assert!(e.contains(&format!("big.toml:{last}")), "{e}");
}

#[test]
fn a_hint_and_probe_bounds_parse_and_bad_ones_name_their_field() {
    let base = "name = \"cold\"\nteam = \"t\"\naccelerators = [\"V100\"]\nworkers = 1\n\
                [work]\nsamples = 100\n";
    let ok = format!(
        "{base}[hint]\nparams = 1.24e8\ntokens_per_sample = 1024\n\
         [probe]\nmax_duration = \"10m\"\nmax_usd = 3\n"
    );
    let s = parse_job_spec(&ok, "cold.toml").expect("valid");
    let h = s.hint.expect("hint");
    assert!((h.flops_per_sample - 6.0 * 1.24e8 * 1024.0).abs() < 1.0);
    assert_eq!(h.params, Some(1.24e8));
    assert_eq!(s.probe.max_seconds, Some(600.0));
    assert_eq!(s.probe.max_usd, Some(3.0));
    assert!(s.observations.is_empty() && s.local_batch.is_none());
    let cases: &[(&str, &[&str])] = &[
        (
            "[hint]\nparams = 1e8\n",
            &["cold.toml:7", "hint.flops_per_sample"],
        ),
        (
            "[hint]\nflops_per_sample = 0\n",
            &["hint.flops_per_sample", "> 0"],
        ),
        (
            "[hint]\nflops_per_sample = 1e9\ntokens_per_sample = 8\n",
            &["hint.tokens_per_sample", "not both"],
        ),
        (
            "[hint]\nflop = 1e9\n",
            &["cold.toml:8", "unknown field `hint.flop`"],
        ),
        (
            "[probe]\nmax_duration = \"soon\"\n",
            &["cold.toml:8", "probe.max_duration"],
        ),
        (
            "[probe]\nmax_duration = -5\n",
            &["probe.max_duration", "> 0"],
        ),
        ("[probe]\nmax_usd = 0\n", &["probe.max_usd", "> 0"]),
        (
            "[probe]\nenabled = \"no\"\n",
            &["probe.enabled", "true or false"],
        ),
    ];
    for (extra, want) in cases {
        let e = parse_job_spec(&format!("{base}{extra}"), "cold.toml")
            .expect_err(extra)
            .to_string();
        for w in *want {
            assert!(e.contains(w), "{extra:?}: {e} lacks {w:?}");
        }
    }
}

const RUN: &str = r#"
[run]
command = ["python", "train.py", "--epochs", "3"]
setup = "pip install -r requirements.txt"
setup_timeout = "20m"
workdir = "~/sky_workdir"
launcher = "none"
nproc_per_node = 8
checkpoint_signal = "usr1"
stop_grace = "90s"
max_restarts = 5
hang_timeout = 1200
[run.env]
HF_HOME = "/data/hf"
WANDB_API_KEY = "s3cr3t"
"#;

#[test]
fn a_run_section_parses_and_specs_without_one_have_none() {
    assert_eq!(parse_job_spec(GOOD, "job.toml").expect("valid").run, None);
    let s = parse_job_spec(&format!("{GOOD}{RUN}"), "job.toml").expect("valid");
    let r = s.run.expect("run");
    assert_eq!(r.command, ["python", "train.py", "--epochs", "3"]);
    assert_eq!(r.setup.as_deref(), Some("pip install -r requirements.txt"));
    assert_eq!(r.setup_timeout_s, Some(1200.0));
    assert_eq!(r.workdir.as_deref(), Some("~/sky_workdir"));
    assert_eq!(r.launcher.as_deref(), Some("none"));
    assert_eq!(r.nproc_per_node, Some(8));
    assert_eq!(r.checkpoint_signal.as_deref(), Some("SIGUSR1"));
    assert_eq!(r.stop_grace_s, Some(90.0));
    assert_eq!(r.max_restarts, Some(5));
    assert_eq!(r.hang_timeout_s, Some(1200.0));
    assert_eq!(r.env["HF_HOME"], "/data/hf");
    // A string command runs through `sh -c`, as written.
    let text = format!("{GOOD}[run]\ncommand = \"cd src && python train.py\"\n");
    let r = parse_job_spec(&text, "job.toml")
        .expect("valid")
        .run
        .expect("run");
    assert_eq!(r.command, ["sh", "-c", "cd src && python train.py"]);
    // What the store keeps reads back the same.
    let s = parse_job_spec(&format!("{GOOD}{RUN}"), "job.toml").expect("valid");
    let json = serde_json::to_string(&s).expect("json");
    assert_eq!(serde_json::from_str::<JobSpec>(&json).expect("back"), s);
}

#[test]
fn a_bad_run_section_names_its_field_and_line_and_never_echoes_an_env_value() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "max_restarts = 5",
            "max_restart = 5",
            &[
                "job.toml:37",
                "unknown field `run.max_restart`",
                "allowed here",
            ],
        ),
        (
            "HF_HOME = \"/data/hf\"",
            "HF_HOME = 3",
            &[
                "job.toml:40",
                "`run.env.HF_HOME`",
                "expected a string",
                "the integer 3",
            ],
        ),
        (
            "HF_HOME = \"/data/hf\"",
            "\"A=B\" = \"x\"",
            &["`run.env.A=B`", "a variable name"],
        ),
        (
            "launcher = \"none\"",
            "launcher = \"mpirun\"",
            &["job.toml:33", "`run.launcher`", "\"torchrun\" or \"none\""],
        ),
        (
            "checkpoint_signal = \"usr1\"",
            "checkpoint_signal = \"SIGKILL\"",
            &["`run.checkpoint_signal`", "SIGUSR2"],
        ),
        (
            "nproc_per_node = 8",
            "nproc_per_node = 0",
            &["`run.nproc_per_node`"],
        ),
        (
            "command = [\"python\", \"train.py\", \"--epochs\", \"3\"]",
            "command = []",
            &["`run.command`", "an array of strings"],
        ),
        (
            "command = [\"python\", \"train.py\", \"--epochs\", \"3\"]",
            "command = [\"python\", 3]",
            &["`run.command[1]`", "a string"],
        ),
        (
            "command = [\"python\", \"train.py\", \"--epochs\", \"3\"]\n",
            "",
            &["missing field `run.command`"],
        ),
        (
            "stop_grace = \"90s\"",
            "stop_grace = \"soon\"",
            &["`run.stop_grace`", "a duration"],
        ),
    ];
    let good = format!("{GOOD}{RUN}");
    for (from, to, wants) in cases {
        assert!(good.contains(from), "{from}");
        let text = good.replacen(from, to, 1);
        let e = parse_job_spec(&text, "job.toml").expect_err(to).to_string();
        for w in *wants {
            assert!(e.contains(w), "{to:?}: {e:?} lacks {w:?}");
        }
        assert!(!e.contains("s3cr3t"), "{e}");
    }
    // A NUL in an env value is refused without showing the value.
    let text = good.replacen("\"s3cr3t\"", "\"s3cr3t\\u0000\"", 1);
    let e = parse_job_spec(&text, "job.toml")
        .expect_err("nul")
        .to_string();
    assert!(
        e.contains("`run.env.WANDB_API_KEY`") && !e.contains("s3cr3t"),
        "{e}"
    );
}
