//! Published hardware figures used when the data cannot tell: relative accelerator speed (for a
//! job never observed on an accelerator) and the cross-node / intra-node sync ratio (for a job
//! never observed across nodes).

/// One row of the hardware table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hardware {
    /// Canonical name as used in job specs.
    pub name: &'static str,
    /// Peak dense FP16/BF16 tensor TFLOPS per chip (vendor datasheets; no sparsity; GeForce
    /// parts at their FP32-accumulate rate, which mixed-precision training uses).
    pub tflops: f64,
    /// Peak memory bandwidth, GB/s per chip (vendor datasheets).
    pub mem_gbps: f64,
    /// Intra-node GPU-to-GPU link bandwidth per direction (GB/s) on the usual cloud node.
    pub link_gbps: f64,
    /// Node network bandwidth (GB/s) of that cloud node.
    pub nic_gbps: f64,
}

/// Vendor datasheet figures (NVIDIA product briefs; Google Cloud TPU system-architecture pages)
/// and the cloud node each accelerator usually comes in (AWS/GCP/Azure instance pages):
/// T4 g4dn.12xlarge (PCIe 3, 50 Gb/s); V100 p3dn/ND40rs_v2 (NVLink 2, 100 Gb/s); A100 p4d
/// (NVLink 3, 400 Gb/s); H100 a3/p5 (NVLink 4, 8×200 Gb/s+); A10G g5.48xlarge, L4 g6.48xlarge
/// (PCIe 4, 100 Gb/s); RTX 2080 Ti / Quadro RTX 6000 PCIe 3 servers with 50 Gb/s Ethernet /
/// 200 Gb/s InfiniBand. Link figures are usable per-direction bandwidth, not marketing totals.
/// TPU slices talk over ICI inside a slice, so their link/NIC pair only matters across slices
/// (data-centre network), taken as 12.5 GB/s. AWS G-family nodes (T4, A10G, L4, L40S) sync
/// across nodes over TCP: see [`TCP_FLOW_GBPS`].
pub const TABLE: &[Hardware] = &[
    hw("K80", 4.4, 240.0, 12.0, 1.25),
    hw("P100", 21.2, 732.0, 20.0, 3.1),
    hw("V100", 125.0, 900.0, 150.0, 12.5),
    hw("T4", 65.0, 320.0, 12.0, TCP_FLOW_GBPS),
    hw("A10G", 70.0, 600.0, 25.0, TCP_FLOW_GBPS),
    hw("A10", 125.0, 600.0, 25.0, 12.5),
    hw("L4", 121.0, 300.0, 25.0, TCP_FLOW_GBPS),
    hw("L40S", 362.0, 864.0, 25.0, TCP_FLOW_GBPS),
    hw("A100", 312.0, 1555.0, 300.0, 50.0),
    hw("A100-80GB", 312.0, 2039.0, 300.0, 50.0),
    hw("H100", 989.0, 3350.0, 450.0, 200.0),
    hw("H200", 989.0, 4800.0, 450.0, 400.0),
    hw("B200", 2250.0, 8000.0, 900.0, 400.0),
    hw("RTX2080TI", 53.8, 616.0, 12.0, 6.25),
    hw("RTX6000", 130.5, 672.0, 12.0, 25.0),
    hw("TPU-V2", 45.0, 600.0, 50.0, 12.5),
    hw("TPU-V3", 123.0, 900.0, 50.0, 12.5),
    hw("TPU-V4", 275.0, 1200.0, 50.0, 12.5),
    hw("TPU-V5E", 197.0, 819.0, 50.0, 12.5),
    hw("TPU-V5P", 459.0, 2765.0, 50.0, 12.5),
    hw("TPU-V6E", 918.0, 1640.0, 50.0, 12.5),
];

/// Cross-node rate of NCCL over TCP on AWS, GB/s: EC2 caps a single flow between instances at
/// 5 Gb/s outside a cluster placement group, whatever the instance's line rate, and NCCL's socket
/// transport (what PyTorch uses unless the EFA/OFI plugin is installed and configured, which
/// G-family images do not do by default) carries a ring over few flows. So a g4dn.12xlarge's
/// 50 Gb/s NIC syncs at ~0.6 GB/s, not 6.25. InfiniBand and EFA-configured P-family nodes keep
/// their line rate.
pub const TCP_FLOW_GBPS: f64 = 0.625;

const fn hw(name: &'static str, tflops: f64, mem_gbps: f64, link: f64, nic: f64) -> Hardware {
    Hardware {
        name,
        tflops,
        mem_gbps,
        link_gbps: link,
        nic_gbps: nic,
    }
}

/// Cross-node / intra-node sync ratio when the hardware is unknown: the geometric middle of
/// [`cross_ratio`] over the hardware table, from InfiniBand nodes (≈ 1) through NVLink nodes
/// with a modest NIC (≈ 2.5–3.5) to PCIe nodes syncing over TCP (≈ 4.4–6.3).
pub fn default_cross_ratio() -> f64 {
    let logs: f64 = TABLE
        .iter()
        .map(|h| cross_ratio(h.link_gbps, h.nic_gbps).ln())
        .sum();
    (logs / TABLE.len() as f64).exp()
}

/// Uncertainty (sd of ln) of a relative-speed prior: datasheet ratios routinely miss real
/// training speedups by 1.5–2× (kernels, memory capacity, input pipelines).
pub const RELATIVE_SPEED_SD: f64 = 0.5;

/// Finds an accelerator by spec name: case-insensitive, ignoring vendor prefixes, spaces and a
/// trailing TPU core count (`tpu-v5p-8` → `TPU-V5P`).
pub fn lookup(name: &str) -> Option<&'static Hardware> {
    let mut key: String = name
        .to_ascii_uppercase()
        .replace("NVIDIA", "")
        .replace("TESLA", "")
        .replace("QUADRO", "")
        .replace("GEFORCE", "")
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '_')
        .collect();
    key = key.trim_matches('-').to_string();
    if key.starts_with("TPU") {
        let parts: Vec<&str> = key.split('-').collect();
        if parts.len() >= 3 && parts[parts.len() - 1].chars().all(|c| c.is_ascii_digit()) {
            key = parts[..parts.len() - 1].join("-");
        }
    }
    let key = match key.as_str() {
        "A100-40GB" | "A10040GB" => "A100".to_string(),
        "A10080GB" => "A100-80GB".to_string(),
        "RTX-2080TI" | "2080TI" => "RTX2080TI".to_string(),
        "RTX-6000" => "RTX6000".to_string(),
        _ => key,
    };
    TABLE.iter().find(|h| h.name == key)
}

/// Relative training speed of an accelerator, T4 = 1. A step is partly compute-bound and partly
/// memory-bound, so we take the geometric mean of the TFLOPS and memory-bandwidth ratios rather
/// than the (optimistic) TFLOPS ratio alone.
pub fn relative_speed(name: &str) -> Option<f64> {
    let t4 = lookup("T4")?;
    let h = lookup(name)?;
    Some(((h.tflops / t4.tflops) * (h.mem_gbps / t4.mem_gbps)).sqrt())
}

/// A priori cross-node / intra-node all-reduce cost ratio for nodes of this accelerator.
pub fn interconnect_ratio(name: &str) -> f64 {
    lookup(name)
        .map(|h| cross_ratio(h.link_gbps, h.nic_gbps))
        .unwrap_or_else(default_cross_ratio)
}

/// Cross-node / intra-node sync ratio from link and NIC bandwidth. A bandwidth-bound ring
/// all-reduce moves the same bytes over every hop, so it slows by ρ = link / NIC when one hop
/// leaves the node; an overhead-bound one (small gradients, framework and launch costs) does not
/// slow at all. Which one a job is cannot be told from one node, so the prior is the geometric
/// middle √ρ (its sd, `fit::CROSS_NODE_SD`, spans both ends). Crossing nodes never makes sync
/// cheaper, hence the floor of 1.
pub fn cross_ratio(link_gbps: f64, nic_gbps: f64) -> f64 {
    (link_gbps / nic_gbps).max(1.0).sqrt()
}

/// A node type: accelerator, GPUs per node and interconnect, for profiles and offers that name
/// the machine rather than the chip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeType {
    pub name: &'static str,
    pub accelerator: &'static str,
    pub gpus: u32,
    pub link_gbps: f64,
    pub nic_gbps: f64,
}

/// Node types of data/profiles (Sia's names) and common cloud instances, from the vendors'
/// instance pages: g4dn.12xlarge 4×T4 PCIe 3, 50 Gb/s (TCP, see [`TCP_FLOW_GBPS`]); ND40rs_v2
/// 8×V100 NVLink 2, 100 Gb/s InfiniBand; DGX-A100 8×A100 NVLink 3 with 8×200 Gb/s InfiniBand;
/// p4d.24xlarge 8×A100, 400 Gb/s EFA; p5.48xlarge 8×H100 NVLink 4, 3200 Gb/s EFA; 4×Quadro RTX
/// 6000 PCIe 3, 200 Gb/s InfiniBand; 8×RTX 2080 Ti PCIe 3, 50 Gb/s Ethernet.
pub const NODE_TYPES: &[NodeType] = &[
    node("aws", "T4", 4, 12.0, TCP_FLOW_GBPS),
    node("g4dn.12xlarge", "T4", 4, 12.0, TCP_FLOW_GBPS),
    node("azure", "V100", 8, 150.0, 12.5),
    node("nd40rs_v2", "V100", 8, 150.0, 12.5),
    node("dgx", "A100", 8, 300.0, 200.0),
    node("dgx-ext", "A100", 8, 300.0, 200.0),
    node("p4d.24xlarge", "A100", 8, 300.0, 50.0),
    node("p5.48xlarge", "H100", 8, 450.0, 400.0),
    node("quad", "RTX6000", 4, 12.0, 25.0),
    node("rtx", "RTX2080TI", 8, 12.0, 6.25),
];

const fn node(
    name: &'static str,
    accelerator: &'static str,
    gpus: u32,
    link: f64,
    nic: f64,
) -> NodeType {
    NodeType {
        name,
        accelerator,
        gpus,
        link_gbps: link,
        nic_gbps: nic,
    }
}

/// Finds a node type by name (case-insensitive).
pub fn node_type(name: &str) -> Option<&'static NodeType> {
    NODE_TYPES
        .iter()
        .find(|n| n.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_normalises_names() {
        assert_eq!(lookup("nvidia a100").map(|h| h.name), Some("A100"));
        assert_eq!(lookup("A100-80GB").map(|h| h.name), Some("A100-80GB"));
        assert_eq!(lookup("tpu-v5p-8").map(|h| h.name), Some("TPU-V5P"));
        assert_eq!(lookup("Tesla T4").map(|h| h.name), Some("T4"));
        assert!(lookup("abacus").is_none());
    }

    #[test]
    fn faster_parts_rank_higher_and_ratios_are_at_least_one() {
        let order = ["K80", "T4", "V100", "A100", "H100"];
        for w in order.windows(2) {
            assert!(relative_speed(w[0]) < relative_speed(w[1]), "{w:?}");
        }
        for h in TABLE {
            assert!(interconnect_ratio(h.name) >= 1.0);
        }
        assert_eq!(interconnect_ratio("unknown"), default_cross_ratio());
        let d = default_cross_ratio();
        let lo = TABLE
            .iter()
            .map(|h| interconnect_ratio(h.name))
            .fold(f64::MAX, f64::min);
        let hi = TABLE
            .iter()
            .map(|h| interconnect_ratio(h.name))
            .fold(0.0, f64::max);
        assert!(lo < d && d < hi, "{lo} < {d} < {hi}");
    }
}
