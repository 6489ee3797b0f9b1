use std::fmt;

use serde::{Deserialize, Serialize};

/// GPUs are counted per VM; a TPU slice is one indivisible unit named by its topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AcceleratorKind {
    Gpu,
    Tpu,
}

/// The accelerators attached to one VM, e.g. 8 × `A100-80GB`, or one `tpu-v5p-8` slice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accelerator {
    /// Canonical name as the catalogs spell it (`A100`, `A100-80GB`, `T4`, `tpu-v5p-8`).
    pub name: String,
    /// GPUs per VM; 1 for a TPU slice.
    pub count: u32,
    /// Memory per accelerator, when known.
    pub memory_gib: Option<f64>,
}

impl Accelerator {
    pub fn new(name: impl Into<String>, count: u32) -> Self {
        Self {
            name: name.into(),
            count,
            memory_gib: None,
        }
    }

    pub fn kind(&self) -> AcceleratorKind {
        // No lower-cased copy: the planner asks this of every configuration it costs.
        if self
            .name
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case("tpu-"))
        {
            AcceleratorKind::Tpu
        } else {
            AcceleratorKind::Gpu
        }
    }

    /// The family quotas are counted in: `A100-80GB` → `A100`, `tpu-v5p-8` → `tpu-v5p`.
    pub fn family(&self) -> String {
        family_of(&self.name)
    }

    /// Chips in a TPU slice (`tpu-v5p-8` → 8); for GPUs, the GPU count.
    pub fn chips(&self) -> u32 {
        match self.kind() {
            AcceleratorKind::Gpu => self.count,
            AcceleratorKind::Tpu => self
                .name
                .rsplit('-')
                .next()
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(1)
                .saturating_mul(self.count),
        }
    }
}

/// The quota family of an accelerator name (see [`Accelerator::family`]).
pub fn family_of(name: &str) -> String {
    if name.to_ascii_lowercase().starts_with("tpu-") {
        match name.rsplit_once('-') {
            Some((head, tail)) if tail.chars().all(|c| c.is_ascii_digit()) => head.to_owned(),
            _ => name.to_owned(),
        }
    } else {
        name.split('-').next().unwrap_or(name).to_owned()
    }
}

impl fmt::Display for Accelerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind() {
            AcceleratorKind::Tpu if self.count == 1 => f.write_str(&self.name),
            _ => write!(f, "{}:{}", self.name, self.count),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_chips() {
        assert_eq!(Accelerator::new("A100-80GB", 8).family(), "A100");
        assert_eq!(Accelerator::new("H100-MEGA", 8).family(), "H100");
        let tpu = Accelerator::new("tpu-v5p-8", 1);
        assert_eq!(tpu.kind(), AcceleratorKind::Tpu);
        assert_eq!(tpu.family(), "tpu-v5p");
        assert_eq!(tpu.chips(), 8);
        assert_eq!(tpu.to_string(), "tpu-v5p-8");
        assert_eq!(Accelerator::new("T4", 4).to_string(), "T4:4");
        assert_eq!(Accelerator::new("T4", 4).chips(), 4);
    }
}
