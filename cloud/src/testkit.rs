//! Builders for tests (feature `test-util`, and this crate's own tests): an [`Offer`] and a
//! [`JobSpec`] in one line each, with the defaults most tests share, so a test states only what
//! it is about. A spec is built as the TOML a user would write and read by the real parser.

use crate::{Accelerator, Availability, Capacity, Cloud, InstanceType, JobSpec, Offer};
use crate::{Region, Zone, parse_job_spec};

/// An offer of `shape` in `zone` on `capacity`: one V100, $0.90/h, on the simulated cloud,
/// available (change any of it with the builder's methods).
pub fn offer(shape: &str, zone: &str, capacity: Capacity) -> OfferBuilder {
    let region = zone
        .trim_end_matches(|c: char| c.is_ascii_lowercase())
        .trim_end_matches('-');
    OfferBuilder(Offer {
        cloud: Cloud::Sim,
        region: Region::new(region),
        zone: Zone::new(zone),
        instance_type: InstanceType {
            name: shape.into(),
            vcpus: 8.0,
            memory_gib: 61.0,
            accelerator: Some(Accelerator::new("V100", 1)),
        },
        capacity,
        price_per_hour: 0.9,
        observed_at: None,
        breakdown: Vec::new(),
        availability: Availability::Available(None),
    })
}

/// See [`offer`].
#[derive(Debug, Clone)]
pub struct OfferBuilder(Offer);

impl OfferBuilder {
    pub fn price(mut self, per_hour: f64) -> Self {
        self.0.price_per_hour = per_hour;
        self
    }
    pub fn gpus(mut self, name: &str, count: u32) -> Self {
        self.0.instance_type.accelerator = Some(Accelerator::new(name, count));
        self
    }
    pub fn cpu_only(mut self) -> Self {
        self.0.instance_type.accelerator = None;
        self
    }
    pub fn cloud(mut self, cloud: Cloud) -> Self {
        self.0.cloud = cloud;
        self
    }
    pub fn region(mut self, region: &str) -> Self {
        self.0.region = Region::new(region);
        self
    }
    /// A breakdown of one part, the instance type at the offer's price (as a catalog prices
    /// an instance with no extras). Call it after [`OfferBuilder::price`].
    pub fn itemised(mut self) -> Self {
        self.0.breakdown = vec![crate::PriceComponent {
            label: self.0.instance_type.name.clone(),
            price_per_hour: self.0.price_per_hour,
        }];
        self
    }
    pub fn availability(mut self, availability: Availability) -> Self {
        self.0.availability = availability;
        self
    }
    pub fn build(self) -> Offer {
        self.0
    }
}

/// A job spec named `name`: team `t`, one V100 worker, not a gang, due in 48 h, 20 million
/// samples at a local batch of 64, measured at 0.2 s a step on one V100.
pub fn spec(name: &str) -> SpecBuilder {
    SpecBuilder {
        name: name.into(),
        team: "t".into(),
        accelerators: vec!["V100".into()],
        workers: "1".into(),
        gang: false,
        deadline: Some("48h".into()),
        samples: 20_000_000,
        local_batch: Some(64),
        observations: vec![("V100".into(), 1, 0.2)],
        top: Vec::new(),
        sections: Vec::new(),
    }
}

/// See [`spec`].
#[derive(Debug, Clone)]
pub struct SpecBuilder {
    name: String,
    team: String,
    accelerators: Vec<String>,
    workers: String,
    gang: bool,
    deadline: Option<String>,
    samples: u64,
    local_batch: Option<u32>,
    /// (accelerator, gpus, step seconds) at the spec's local batch.
    observations: Vec<(String, u32, f64)>,
    top: Vec<String>,
    sections: Vec<String>,
}

impl SpecBuilder {
    pub fn team(mut self, team: &str) -> Self {
        self.team = team.into();
        self
    }
    pub fn accelerators(mut self, names: &[&str]) -> Self {
        self.accelerators = names.iter().map(|n| n.to_string()).collect();
        self
    }
    /// `"4"`, or an elastic range as TOML: `"{ min = 2, max = 4 }"`.
    pub fn workers(mut self, workers: &str) -> Self {
        self.workers = workers.into();
        self
    }
    pub fn gang(mut self, gang: bool) -> Self {
        self.gang = gang;
        self
    }
    /// A spec duration (`"26h"`), or `None` for a job without a deadline.
    pub fn deadline(mut self, deadline: Option<&str>) -> Self {
        self.deadline = deadline.map(String::from);
        self
    }
    pub fn samples(mut self, samples: u64) -> Self {
        self.samples = samples;
        self
    }
    pub fn local_batch(mut self, local_batch: Option<u32>) -> Self {
        self.local_batch = local_batch;
        self
    }
    /// Replace the observations with one step time on `gpus` of `accelerator`.
    pub fn measured(mut self, accelerator: &str, gpus: u32, step_seconds: f64) -> Self {
        self.observations = vec![(accelerator.into(), gpus, step_seconds)];
        self
    }
    /// No observation: a job nobody has measured.
    pub fn unmeasured(mut self) -> Self {
        self.observations.clear();
        self
    }
    /// A top-level key, as written (`"exclude = [\"us-west-2a\"]"`).
    pub fn top(mut self, toml: &str) -> Self {
        self.top.push(toml.trim().to_string());
        self
    }
    /// A TOML section appended as written (`"[probe]\nmax_usd = 2"`).
    pub fn section(mut self, toml: &str) -> Self {
        self.sections.push(toml.trim().to_string());
        self
    }

    /// The spec as the TOML a user would write.
    pub fn text(&self) -> String {
        let quoted: Vec<String> = self.accelerators.iter().map(|a| format!("{a:?}")).collect();
        let mut t = format!(
            "name = {:?}\nteam = {:?}\naccelerators = [{}]\nworkers = {}\ngang = {}\n",
            self.name,
            self.team,
            quoted.join(", "),
            self.workers,
            self.gang
        );
        if let Some(d) = &self.deadline {
            t.push_str(&format!("deadline = {d:?}\n"));
        }
        if let Some(b) = self.local_batch {
            t.push_str(&format!("local_batch = {b}\n"));
        }
        for line in &self.top {
            t.push_str(line);
            t.push('\n');
        }
        t.push_str(&format!("[work]\nsamples = {}\n", self.samples));
        let batch = self.local_batch.unwrap_or(64);
        for (acc, gpus, step) in &self.observations {
            t.push_str(&format!(
                "[[observation]]\naccelerator = {acc:?}\ngpus = {gpus}\nlocal_batch = {batch}\nstep_seconds = {step}\n"
            ));
        }
        for s in &self.sections {
            t.push_str(s);
            t.push('\n');
        }
        t
    }

    /// The spec, read by the real parser (panics on a spec it rejects: a test's mistake).
    pub fn build(&self) -> JobSpec {
        let path = format!("{}.toml", self.name);
        parse_job_spec(&self.text(), &path)
            .unwrap_or_else(|e| panic!("the test's spec is invalid: {e}\n{}", self.text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builders_make_what_they_say() {
        let o = offer("p3.2xlarge", "us-west-2a", Capacity::Spot)
            .price(1.2)
            .build();
        assert_eq!(o.region.as_str(), "us-west-2");
        assert_eq!(o.accelerator_units(), 1);
        assert_eq!(o.price_per_hour, 1.2);
        let s = spec("j")
            .workers("{ min = 2, max = 4 }")
            .deadline(None)
            .section("[probe]\nmax_usd = 2")
            .top("exclude = [\"a-1\"]")
            .build();
        assert!(!s.constraints.is_empty());
        assert_eq!((s.workers.min, s.workers.max), (2, 4));
        assert!(s.deadline.is_none());
        assert_eq!(s.observations.len(), 1);
        assert_eq!(s.probe.max_usd, Some(2.0));
        assert!(spec("cold").unmeasured().build().observations.is_empty());
    }
}
