//! The README's agent examples run as written, and the Python helper passes its own tests.

use super::*;

/// The fenced block after `marker` in the README.
fn readme_block(marker: &str) -> String {
    let readme = std::fs::read_to_string(format!("{REPO}/README.md")).expect("README");
    let at = readme
        .find(marker)
        .unwrap_or_else(|| panic!("README has no {marker}"));
    let rest = &readme[at..];
    let open = rest.find("```").expect("a fenced block");
    let body = &rest[open..];
    let body = &body[body.find('\n').expect("fence line") + 1..];
    body[..body.find("```").expect("closing fence")].to_string()
}

#[test]
fn the_readme_agent_examples_run_verbatim() {
    let _one = serial();
    let train = readme_block("<!-- readme-test: train.py -->");
    let commands: Vec<String> = readme_block("<!-- readme-test: agent -->")
        .lines()
        .filter(|l| l.starts_with("tern agent "))
        .map(String::from)
        .collect();
    assert_eq!(commands.len(), 5, "{commands:?}");
    for command in commands {
        let job = command
            .split_whitespace()
            .skip_while(|w| *w != "--job")
            .nth(1)
            .expect("--job NAME");
        let samples: u64 = command
            .split_whitespace()
            .last()
            .and_then(|w| w.parse().ok())
            .expect("the example ends with its sample count");
        let c = Cluster::start(job, samples, 5000);
        let id = c.instances(1)[0].clone();
        let work = c.dir.path();
        std::fs::write(work.join("train.py"), &train).expect("train.py");
        // `tern` on PATH is the binary under test.
        let bin = Path::new(env!("CARGO_BIN_EXE_tern"))
            .parent()
            .expect("bin dir")
            .display()
            .to_string();
        let out = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .current_dir(work)
            .env("TERN_SERVER", &c.server)
            .env("TERN_TOKEN", TOKEN)
            .env("TERN_INSTANCE_ID", &id)
            .env("TERN_NOTICE", "none")
            .env("TERN_AGENT_INTERVAL", "0.5")
            .env("PATH", format!("{bin}:{}", venv_path()))
            .env("PYTHONPATH", format!("{REPO}/python"))
            .output()
            .expect("sh");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command}:\n{log}");
        let s = c.status();
        assert_eq!(s["state"], "finished", "{command}: {s}\n{log}");
        assert_eq!(s["done_samples"].as_f64(), Some(samples as f64), "{s}");
        assert_eq!(gone(job, Duration::ZERO), Ok(()), "{command}");
    }
}

#[test]
fn the_python_helper_and_its_lightning_callback_pass_their_tests() {
    let _one = serial();
    let out = Command::new(python())
        .args(["-m", "unittest", "discover", "-s", "tests"])
        .current_dir(format!("{REPO}/python"))
        .output()
        .expect("python");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("\nOK"), "{text}");
    assert!(!text.contains("skipped"), "Lightning must be there: {text}");
}
