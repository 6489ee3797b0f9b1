//! The command line that starts the training, from what users write after `--`.
//!
//! torchrun runs `python -u SCRIPT args` in each worker, `-m MODULE` as a module, and
//! `--no-python` an executable as is (DESIGN §5b), so `torchrun python train.py` would try to
//! run a script named `python`. The agent therefore reads the user's command first:
//!
//! | after `--` | under torchrun |
//! | --- | --- |
//! | `train.py ARGS` | `torchrun OPTS train.py ARGS` |
//! | `python[3] [-u] train.py ARGS` | `python3 -m torch.distributed.run OPTS train.py ARGS` |
//! | `python[3] [-u] -m pkg.mod ARGS` | `python3 -m torch.distributed.run OPTS -m pkg.mod ARGS` |
//! | `python3 -X dev train.py` (other interpreter flags) | `python3 -m torch.distributed.run OPTS --no-python python3 -X dev train.py` |
//! | `./run.sh ARGS`, any executable | `torchrun OPTS --no-python ./run.sh ARGS` |
//!
//! A named interpreter also runs torchrun itself (`-m torch.distributed.run`), so the workers
//! use the interpreter, virtual environment and PyTorch the user named. With
//! `--launcher none` the command runs as written (a `.py` script through `python3`).

/// How the training's processes are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// torchrun's elastic agent, one per node, starting `nproc_per_node` workers.
    Torchrun,
    /// The command as written: one process (and whatever it starts).
    None,
}

/// torchrun's settings for this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torchrun {
    pub job: String,
    /// Elastic node range `MIN:MAX`, or one number.
    pub nnodes: String,
    pub nproc_per_node: u32,
    /// Rendezvous endpoint `HOST:PORT` (c10d store on one of the nodes); without one, a
    /// single-node job runs `--standalone`.
    pub rdzv_endpoint: Option<String>,
    /// Extra `--rdzv-conf` (e.g. `last_call_timeout=5`).
    pub rdzv_conf: Option<String>,
}

/// Why a command cannot be launched as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    #[error("no training command after `--`")]
    Empty,
    #[error("`{0}` with no script or `-m MODULE` after it: nothing to train")]
    BareInterpreter(String),
    #[error("`-m` needs a module name after it")]
    NoModule,
    #[error(
        "--nnodes {0}: several nodes need --rdzv-endpoint HOST:PORT (where torchrun's c10d rendezvous runs)"
    )]
    NoEndpoint(String),
    #[error("--nnodes {0}: expected N or MIN:MAX with 1 <= MIN <= MAX")]
    Nodes(String),
}

/// What the user's command is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Form<'a> {
    /// A Python script run by torchrun's (or the PATH's) interpreter.
    Script { script: &'a str, args: &'a [String] },
    /// A named interpreter with only `-u`, then a script or `-m module`.
    Python {
        python: &'a str,
        module: bool,
        target: &'a str,
        args: &'a [String],
    },
    /// Anything else, run as is: an executable, or an interpreter with other flags.
    Exec(&'a [String]),
}

/// `python`, `python3`, `python3.11`, or a path ending in one.
pub fn is_python(program: &str) -> bool {
    let base = program.rsplit('/').next().unwrap_or(program);
    let Some(version) = base.strip_prefix("python") else {
        return false;
    };
    version.chars().all(|c| c.is_ascii_digit() || c == '.')
}

fn form(command: &[String]) -> Result<Form<'_>, LaunchError> {
    let (program, rest) = command.split_first().ok_or(LaunchError::Empty)?;
    if !is_python(program) {
        if program.ends_with(".py") {
            return Ok(Form::Script {
                script: program,
                args: rest,
            });
        }
        return Ok(Form::Exec(command));
    }
    let mut i = 0;
    while i < rest.len() {
        match rest[i].as_str() {
            "-u" => i += 1,
            "-m" => {
                let target = rest.get(i + 1).ok_or(LaunchError::NoModule)?;
                return Ok(Form::Python {
                    python: program,
                    module: true,
                    target,
                    args: &rest[i + 2..],
                });
            }
            a if a.starts_with('-') => return Ok(Form::Exec(command)),
            target => {
                return Ok(Form::Python {
                    python: program,
                    module: false,
                    target,
                    args: &rest[i + 1..],
                });
            }
        }
    }
    Err(LaunchError::BareInterpreter(program.clone()))
}

fn check_nodes(nnodes: &str) -> Result<(u32, u32), LaunchError> {
    let bad = || LaunchError::Nodes(nnodes.to_string());
    let (lo, hi) = nnodes.split_once(':').unwrap_or((nnodes, nnodes));
    let lo: u32 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u32 = hi.trim().parse().map_err(|_| bad())?;
    if lo == 0 || lo > hi {
        return Err(bad());
    }
    Ok((lo, hi))
}

/// torchrun's options for this node (without the program).
fn torchrun_options(t: &Torchrun) -> Result<Vec<String>, LaunchError> {
    let (_, most) = check_nodes(&t.nnodes)?;
    let mut v = vec![
        format!("--nnodes={}", t.nnodes),
        format!("--nproc-per-node={}", t.nproc_per_node),
    ];
    match &t.rdzv_endpoint {
        Some(e) => {
            v.push("--rdzv-backend=c10d".to_string());
            v.push(format!("--rdzv-id={}", t.job));
            v.push(format!("--rdzv-endpoint={e}"));
        }
        None if most == 1 => v.push("--standalone".to_string()),
        None => return Err(LaunchError::NoEndpoint(t.nnodes.clone())),
    }
    if let Some(c) = &t.rdzv_conf {
        v.push(format!("--rdzv-conf={c}"));
    }
    // The agent restarts the training itself, bounded and with backoff, as a new
    // incarnation; torchrun's own restarts have neither.
    v.push("--max-restarts=0".to_string());
    Ok(v)
}

/// The command line that runs `command` with `launcher`.
pub fn command_line(
    launcher: Launcher,
    torchrun: &Torchrun,
    command: &[String],
) -> Result<Vec<String>, LaunchError> {
    let form = form(command)?;
    if launcher == Launcher::None {
        return Ok(match form {
            Form::Script { script, args } => std::iter::once("python3".to_string())
                .chain(std::iter::once(script.to_string()))
                .chain(args.iter().cloned())
                .collect(),
            _ => command.to_vec(),
        });
    }
    let options = torchrun_options(torchrun)?;
    let mut v: Vec<String> = Vec::new();
    match form {
        Form::Script { script, args } => {
            v.push("torchrun".into());
            v.extend(options);
            v.push(script.into());
            v.extend(args.iter().cloned());
        }
        Form::Python {
            python,
            module,
            target,
            args,
        } => {
            v.extend([
                python.to_string(),
                "-m".into(),
                "torch.distributed.run".into(),
            ]);
            v.extend(options);
            if module {
                v.push("-m".into());
            }
            v.push(target.into());
            v.extend(args.iter().cloned());
        }
        Form::Exec(all) => {
            match all.first().filter(|p| is_python(p)) {
                Some(python) => {
                    v.extend([python.clone(), "-m".into(), "torch.distributed.run".into()]);
                }
                None => v.push("torchrun".into()),
            }
            v.extend(options);
            v.push("--no-python".into());
            v.extend(all.iter().cloned());
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn single() -> Torchrun {
        Torchrun {
            job: "bert".into(),
            nnodes: "1".into(),
            nproc_per_node: 2,
            rdzv_endpoint: None,
            rdzv_conf: None,
        }
    }

    const OPTS: &str = "--nnodes=1 --nproc-per-node=2 --standalone --max-restarts=0";

    #[test]
    fn every_form_users_write_becomes_a_command_torchrun_runs() {
        let t = single();
        let cases = [
            (
                "train.py --lr 0.1",
                format!("torchrun {OPTS} train.py --lr 0.1"),
            ),
            (
                "python train.py --lr 0.1",
                format!("python -m torch.distributed.run {OPTS} train.py --lr 0.1"),
            ),
            (
                "python3 -u train.py",
                format!("python3 -m torch.distributed.run {OPTS} train.py"),
            ),
            (
                "/opt/venv/bin/python3.11 -m pkg.train --epochs 3",
                format!(
                    "/opt/venv/bin/python3.11 -m torch.distributed.run {OPTS} -m pkg.train --epochs 3"
                ),
            ),
            (
                "python3 -X dev train.py",
                format!(
                    "python3 -m torch.distributed.run {OPTS} --no-python python3 -X dev train.py"
                ),
            ),
            (
                "./run.sh a b",
                format!("torchrun {OPTS} --no-python ./run.sh a b"),
            ),
            // A script argument that looks like a flag stays the script's.
            (
                "python -u train.py -m x",
                format!("python -m torch.distributed.run {OPTS} train.py -m x"),
            ),
        ];
        for (user, want) in cases {
            let got = command_line(Launcher::Torchrun, &t, &words(user)).expect(user);
            assert_eq!(got.join(" "), want, "{user}");
        }
    }

    #[test]
    fn launcher_none_runs_the_command_as_written() {
        let t = single();
        let run = |s: &str| command_line(Launcher::None, &t, &words(s)).map(|v| v.join(" "));
        assert_eq!(run("python3 -u train.py"), Ok("python3 -u train.py".into()));
        assert_eq!(run("train.py --x"), Ok("python3 train.py --x".into()));
        assert_eq!(run("./serve --port 1"), Ok("./serve --port 1".into()));
    }

    #[test]
    fn elastic_nodes_rendezvous_and_bad_commands_are_named() {
        let t = Torchrun {
            nnodes: "1:2".into(),
            rdzv_endpoint: Some("10.0.0.5:29400".into()),
            rdzv_conf: Some("last_call_timeout=5".into()),
            ..single()
        };
        let got = command_line(Launcher::Torchrun, &t, &words("train.py")).expect("ok");
        for want in [
            "--nnodes=1:2",
            "--rdzv-backend=c10d",
            "--rdzv-id=bert",
            "--rdzv-endpoint=10.0.0.5:29400",
            "--rdzv-conf=last_call_timeout=5",
        ] {
            assert!(got.contains(&want.to_string()), "{want} in {got:?}");
        }
        let no_endpoint = Torchrun {
            rdzv_endpoint: None,
            ..t.clone()
        };
        assert_eq!(
            command_line(Launcher::Torchrun, &no_endpoint, &words("train.py")),
            Err(LaunchError::NoEndpoint("1:2".into()))
        );
        for bad in ["0:2", "3:2", "x", ""] {
            let t = Torchrun {
                nnodes: bad.into(),
                ..t.clone()
            };
            assert!(matches!(
                command_line(Launcher::Torchrun, &t, &words("train.py")),
                Err(LaunchError::Nodes(_))
            ));
        }
        let t = single();
        assert_eq!(
            command_line(Launcher::Torchrun, &t, &[]),
            Err(LaunchError::Empty)
        );
        assert_eq!(
            command_line(Launcher::Torchrun, &t, &words("python3 -u")),
            Err(LaunchError::BareInterpreter("python3".into()))
        );
        assert_eq!(
            command_line(Launcher::Torchrun, &t, &words("python -m")),
            Err(LaunchError::NoModule)
        );
        assert!(is_python("/usr/bin/python3.12") && !is_python("pythonic") && !is_python("py"));
    }
}
