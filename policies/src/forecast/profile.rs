//! Parsers for throughput profiles (`placements*.csv`, `scalability*.csv`, `validation-*.csv`;
//! see data/profiles/README.md). Pure: the caller reads the file and passes its text and name,
//! which every error message carries together with the line number.

use serde::{Deserialize, Serialize};

use super::ForecastError;
use super::model::{Sample, Shape};

/// One measured row of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileRow {
    pub shape: Shape,
    pub step_s: f64,
    /// Measured all-reduce part, if the file has it.
    pub sync_s: Option<f64>,
    /// 1-based line in the source file.
    pub line: usize,
}

impl ProfileRow {
    pub fn sample(&self) -> Sample {
        Sample {
            shape: self.shape,
            step_s: self.step_s,
        }
    }
}

fn err(file: &str, line: usize, msg: impl Into<String>) -> ForecastError {
    ForecastError::Profile {
        file: file.to_string(),
        line,
        msg: msg.into(),
    }
}

/// Header-addressed CSV: the column order differs between the Pollux and Sia files.
struct Table<'a> {
    file: &'a str,
    header: Vec<&'a str>,
    rows: Vec<(usize, Vec<&'a str>)>,
}

impl<'a> Table<'a> {
    fn parse(text: &'a str, file: &'a str) -> Result<Self, ForecastError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty());
        let (_, head) = lines
            .next()
            .ok_or_else(|| err(file, 1, "empty file: expected a CSV header"))?;
        let header: Vec<&str> = head.split(',').map(str::trim).collect();
        let mut rows = Vec::new();
        for (n, l) in lines {
            let cells: Vec<&str> = l.split(',').map(str::trim).collect();
            if cells.len() != header.len() {
                return Err(err(
                    file,
                    n,
                    format!(
                        "expected {} columns ({}), found {}",
                        header.len(),
                        header.join(","),
                        cells.len()
                    ),
                ));
            }
            rows.push((n, cells));
        }
        if rows.is_empty() {
            return Err(err(file, 2, "no data rows after the header"));
        }
        Ok(Self { file, header, rows })
    }

    fn col(&self, name: &str) -> Result<usize, ForecastError> {
        self.header.iter().position(|h| *h == name).ok_or_else(|| {
            err(
                self.file,
                1,
                format!(
                    "missing column `{name}` (header is `{}`)",
                    self.header.join(",")
                ),
            )
        })
    }

    fn num(&self, line: usize, cells: &[&str], col: usize) -> Result<f64, ForecastError> {
        let name = self.header[col];
        let v: f64 = cells[col].parse().map_err(|_| {
            err(
                self.file,
                line,
                format!("column `{name}`: `{}` is not a number", cells[col]),
            )
        })?;
        if !v.is_finite() {
            return Err(err(
                self.file,
                line,
                format!("column `{name}`: {v} is not finite"),
            ));
        }
        Ok(v)
    }

    fn positive(&self, line: usize, cells: &[&str], col: usize) -> Result<f64, ForecastError> {
        let v = self.num(line, cells, col)?;
        if v <= 0.0 {
            return Err(err(
                self.file,
                line,
                format!("column `{}`: expected > 0, found {v}", self.header[col]),
            ));
        }
        Ok(v)
    }

    fn count(&self, line: usize, cells: &[&str], col: usize) -> Result<u32, ForecastError> {
        let v = self.positive(line, cells, col)?;
        if v.fract() != 0.0 || v > f64::from(u32::MAX) {
            return Err(err(
                self.file,
                line,
                format!(
                    "column `{}`: expected a whole number, found {v}",
                    self.header[col]
                ),
            ));
        }
        Ok(v as u32)
    }
}

/// Parses a `placements*.csv` (`placement,local_bsz,step_time,sync_time` in any column order)
/// or a `scalability*.csv` (`num_nodes,num_replicas,local_bsz,step_time,sync_time`): the header
/// decides which.
pub fn parse_profile(text: &str, file: &str) -> Result<Vec<ProfileRow>, ForecastError> {
    let t = Table::parse(text, file)?;
    let placement = t.header.contains(&"placement");
    let (c_place, c_nodes, c_reps) = if placement {
        (Some(t.col("placement")?), None, None)
    } else {
        (
            None,
            Some(t.col("num_nodes")?),
            Some(t.col("num_replicas")?),
        )
    };
    let c_bsz = t.col("local_bsz")?;
    let c_step = t.col("step_time")?;
    let c_sync = t.header.iter().position(|h| *h == "sync_time");
    let mut out = Vec::with_capacity(t.rows.len());
    for (line, cells) in &t.rows {
        let line = *line;
        let (gpus, nodes, busiest) = match (c_place, c_nodes, c_reps) {
            (Some(c), _, _) => placement_shape(cells[c]).ok_or_else(|| {
                err(
                    file,
                    line,
                    format!(
                        "column `placement`: `{}` is not a digit string (GPUs per node, e.g. `22`)",
                        cells[c]
                    ),
                )
            })?,
            (None, Some(n), Some(r)) => {
                let nodes = t.count(line, cells, n)?;
                let gpus = t.count(line, cells, r)?;
                if nodes > gpus {
                    return Err(err(
                        file,
                        line,
                        format!("{nodes} nodes but only {gpus} replicas"),
                    ));
                }
                (gpus, nodes, gpus.div_ceil(nodes))
            }
            _ => unreachable_columns(file)?,
        };
        let local_batch = t.positive(line, cells, c_bsz)?;
        let step_s = t.positive(line, cells, c_step)?;
        let sync_s = match c_sync {
            Some(c) => Some(t.num(line, cells, c)?),
            None => None,
        };
        out.push(ProfileRow {
            shape: Shape::placed(gpus, nodes, busiest, local_batch),
            step_s,
            sync_s,
            line,
        });
    }
    Ok(out)
}

fn unreachable_columns(file: &str) -> Result<(u32, u32, u32), ForecastError> {
    Err(err(
        file,
        1,
        "expected `placement` or `num_nodes,num_replicas`",
    ))
}

/// `"1124"` → (8 GPUs, 4 nodes, 4 on the fullest node). Zeros are allowed (an empty node) and do
/// not count as nodes.
pub fn placement_shape(p: &str) -> Option<(u32, u32, u32)> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits: Vec<u32> = p.bytes().map(|b| u32::from(b - b'0')).collect();
    let gpus: u32 = digits.iter().sum();
    let nodes = digits.iter().filter(|d| **d > 0).count() as u32;
    let busiest = digits.iter().copied().max().unwrap_or(0);
    (gpus > 0).then_some((gpus, nodes, busiest))
}

/// Gradient statistics from a `validation-<M>.csv`, measured at total batch `batch`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GradientNoise {
    pub batch: f64,
    pub grad_sqr: f64,
    pub grad_var: f64,
}

impl GradientNoise {
    /// Pollux's statistical efficiency of total batch `m` relative to `self.batch`:
    /// E = (var + sqr) / (var + (m / M)·sqr). One sample at batch m is worth E samples at M.
    pub fn efficiency(&self, m: f64) -> f64 {
        let (v, s) = (self.grad_var.max(0.0), self.grad_sqr.max(0.0));
        if v + s <= 0.0 {
            return 1.0;
        }
        (v + s) / (v + (m / self.batch) * s)
    }
}

/// Parses `validation-<M>.csv` and averages its gradient statistics over the run (the noise
/// scale drifts during training; the mean is what a whole-run runtime needs).
pub fn parse_validation(
    text: &str,
    file: &str,
    batch: f64,
) -> Result<GradientNoise, ForecastError> {
    if !(batch.is_finite() && batch > 0.0) {
        return Err(err(file, 0, format!("batch size {batch} must be > 0")));
    }
    let t = Table::parse(text, file)?;
    let (cs, cv) = (t.col("grad_sqr")?, t.col("grad_var")?);
    let (mut s, mut v) = (0.0, 0.0);
    for (line, cells) in &t.rows {
        s += t.num(*line, cells, cs)?;
        v += t.num(*line, cells, cv)?;
    }
    let n = t.rows.len() as f64;
    Ok(GradientNoise {
        batch,
        grad_sqr: s / n,
        grad_var: v / n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_layouts() {
        let p = parse_profile(
            "placement,local_bsz,step_time,sync_time\n1,32,0.04,0.0005\n22,64,0.2,0.05\n17,8,0.8,0.6\n",
            "p.csv",
        )
        .expect("parse");
        assert_eq!(p[1].shape, Shape::new(4, 2, 64.0));
        assert_eq!(p[1].line, 3);
        // An uneven placement keeps its fullest node.
        assert_eq!(p[2].shape, Shape::placed(8, 2, 7, 8.0));
        assert_ne!(p[2].shape, Shape::new(8, 2, 8.0));
        let s = parse_profile(
            "local_bsz,step_time,sync_time,num_nodes,num_replicas\n20.0,0.12,0.004,2,3\n",
            "s.csv",
        )
        .expect("parse");
        assert_eq!(s[0].shape, Shape::new(3, 2, 20.0));
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let cases = [
            ("", "e.csv:1", "empty"),
            ("placement,local_bsz,step_time\n", "e.csv:2", "no data"),
            (
                "placement,step_time\n1,0.1\n",
                "e.csv:1",
                "missing column `local_bsz`",
            ),
            (
                "placement,local_bsz,step_time\n1,32,0.1\n1,0,0.1\n",
                "e.csv:3",
                "local_bsz",
            ),
            (
                "placement,local_bsz,step_time\n1,32,NaN\n",
                "e.csv:2",
                "not finite",
            ),
            (
                "placement,local_bsz,step_time\n1,32\n",
                "e.csv:2",
                "expected 3 columns",
            ),
            (
                "placement,local_bsz,step_time\nx1,32,0.1\n",
                "e.csv:2",
                "placement",
            ),
        ];
        for (text, at, what) in cases {
            let e = parse_profile(text, "e.csv").expect_err(text).to_string();
            assert!(e.contains(at) && e.contains(what), "{text:?} gave {e}");
        }
    }

    #[test]
    fn efficiency_is_one_at_reference_and_falls_with_batch() {
        let g = GradientNoise {
            batch: 128.0,
            grad_sqr: 1.0,
            grad_var: 3.0,
        };
        assert!((g.efficiency(128.0) - 1.0).abs() < 1e-12);
        assert!(g.efficiency(1024.0) < g.efficiency(256.0));
        assert!(g.efficiency(64.0) > 1.0);
    }
}
