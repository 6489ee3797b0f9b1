//! A job nobody has measured: probed on real steps, then planned on what they measured.

use super::*;

/// A job nobody has measured: no observation, no profile, no hint.
fn cold_spec(dir: &Path, name: &str, samples: u64) -> PathBuf {
    write_spec(
        dir,
        name,
        "1",
        "",
        samples,
        "[probe]\nmax_duration = \"3m\"\n",
    )
}

#[test]
fn a_cold_start_job_probes_is_measured_by_its_real_steps_and_planned() {
    let _one = serial();
    let job = "cold";
    let c = Cluster::start_with(job, 5000, |dir| cold_spec(dir, job, 6000));
    let id = c.instances(1)[0].clone();
    assert!(
        job_events(&c).iter().any(|(k, _)| k == "probe"),
        "{:?}",
        job_events(&c)
    );
    let before = c.status()["forecast"].clone();
    assert_eq!(before["basis"], "none", "{before}");

    let work = c.dir.path().to_path_buf();
    let progress = work.join("progress.json");
    let steps = work.join("steps.jsonl");
    let ckpt = work.join("ckpt.pt");
    let train = format!("{REPO}/tests/training/train_ddp.py");
    let p = progress.to_str().expect("utf-8");
    let mut agent = c.agent(
        &id,
        &work,
        &["--progress-file", p, "--nproc-per-node", "1"],
        &[
            &train,
            "--ckpt",
            ckpt.to_str().expect("utf-8"),
            "--total-samples",
            "6000",
            "--step-sleep",
            "0.05",
            "--log-file",
            steps.to_str().expect("utf-8"),
            "--log-steps",
        ],
    );
    // Measured within a minute of real steps.
    let until = Instant::now() + Duration::from_secs(90);
    let measured = loop {
        let f = c.status()["forecast"].clone();
        if f["basis"] == "measured" {
            break f;
        }
        assert!(
            Instant::now() < until,
            "never measured: {f}\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    // Within 10 % of the mean of the steps it ran (the first two warm up, untimed by the
    // helper too).
    let ran: Vec<f64> = events(&steps)
        .iter()
        .filter(|e| e["event"] == "step")
        .filter_map(|e| e["seconds"].as_f64())
        .skip(2)
        .collect();
    assert!(!ran.is_empty(), "no steps logged");
    let mean = ran.iter().sum::<f64>() / ran.len() as f64;
    let step = measured["step_seconds"].as_f64().expect("step_seconds");
    eprintln!(
        "cold start: forecast {step:.4} s/step on {} after {} report(s); the {} steps so far \
         averaged {mean:.4} s",
        measured["accelerator"],
        measured["observations"],
        ran.len()
    );
    assert!(
        (step - mean).abs() / mean <= 0.10,
        "forecast {step} s vs mean {mean} s"
    );
    // The probe ends and the plan takes over on what was measured.
    let until = Instant::now() + Duration::from_secs(60);
    while !job_events(&c).iter().any(|(k, _)| k == "probed") {
        assert!(Instant::now() < until, "{:?}", job_events(&c));
        std::thread::sleep(Duration::from_millis(300));
    }
    let ev = job_events(&c);
    let probed = ev.iter().find(|(k, _)| k == "probed").expect("probed");
    assert!(probed.1.contains("measured"), "{probed:?}");
    assert!(
        ev.iter()
            .any(|(k, m)| k == "basis" && m.contains("none → measured")),
        "{ev:?}"
    );
    assert!(
        agent.wait(Duration::from_secs(120)).success(),
        "{}",
        agent.log()
    );
    let until = Instant::now() + Duration::from_secs(30);
    while c.status()["state"] != "finished" {
        assert!(Instant::now() < until, "{}", c.status());
        std::thread::sleep(Duration::from_millis(300));
    }
}
