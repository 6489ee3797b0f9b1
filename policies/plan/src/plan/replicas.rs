//! Jobs that differ only in their names (a sweep's replicas, copies of one spec) have the same
//! configurations, costs and resource use: a plan generates and prunes them once and copies
//! the first one's list. Two jobs count as replicas only when every planning input is equal and they share
//! one throughput model (`Arc::ptr_eq`: a model cannot be compared by value).

use std::collections::HashMap;
use std::sync::Arc;

use super::CandidateCounts;
use crate::input::PlanJob;

/// The jobs whose lists were made, found by a cheap key and confirmed field by field.
#[derive(Default)]
pub(super) struct Replicas {
    /// Each job whose list was made, with what making it added to the plan's counts.
    made: HashMap<(usize, u64), Vec<(usize, CandidateCounts)>>,
}

impl Replicas {
    /// The earlier job whose list `jobs[j]` may copy, and what making that list counted.
    pub(super) fn of(&self, jobs: &[PlanJob], j: usize) -> Option<(usize, CandidateCounts)> {
        self.made
            .get(&key(&jobs[j]))?
            .iter()
            .find(|(first, _)| replicas(&jobs[*first], &jobs[j]))
            .copied()
    }

    /// `jobs[j]`'s list was made, counting `counts`: its replicas may copy it.
    pub(super) fn keep(&mut self, jobs: &[PlanJob], j: usize, counts: CandidateCounts) {
        self.made
            .entry(key(&jobs[j]))
            .or_default()
            .push((j, counts));
    }
}

fn key(job: &PlanJob) -> (usize, u64) {
    (
        Arc::as_ptr(&job.model).cast::<()>() as usize,
        job.remaining_samples.to_bits(),
    )
}

/// Whether `a` and `b` plan alike: every field but the name (listed in full, so a new field
/// must be placed on one side or the other).
pub(super) fn replicas(a: &PlanJob, b: &PlanJob) -> bool {
    let PlanJob {
        name: _,
        team,
        remaining_samples,
        deadline_s,
        accelerators,
        workers,
        gang,
        checkpoint,
        budget,
        priority,
        model,
        constraints,
        checkpoint_region,
    } = a;
    *team == b.team
        && remaining_samples.to_bits() == b.remaining_samples.to_bits()
        && deadline_s.map(f64::to_bits) == b.deadline_s.map(f64::to_bits)
        && *accelerators == b.accelerators
        && *workers == b.workers
        && *gang == b.gang
        && *checkpoint == b.checkpoint
        && *budget == b.budget
        && *priority == b.priority
        && Arc::ptr_eq(model, &b.model)
        && *constraints == b.constraints
        && *checkpoint_region == b.checkpoint_region
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tern_cloud::{Capacity, Cloud};

    use super::replicas;
    use crate::input::{PlanJob, PlanOptions};
    use crate::plan::plan;
    use crate::plan::tests::{Table, aws_quota, job, offer};
    #[test]
    fn replicas_differ_only_in_their_names() {
        let a = job("a", &["A100"], 100.0, None, &[("A100", 1.0)]);
        let mut b = a.clone();
        b.name = "b".into();
        assert!(replicas(&a, &b));
        let mut more_work = b.clone();
        more_work.remaining_samples += 1.0;
        let mut first = b.clone();
        first.priority += 1;
        let own_model = job("c", &["A100"], 100.0, None, &[("A100", 1.0)]);
        for other in [more_work, first, own_model] {
            assert!(!replicas(&a, &other), "{other:?}");
        }
    }

    /// Copying a replica's configurations changes nothing: the plan of replicas that share a model
    /// equals, field for field, the plan of the same jobs each with a model of its own (which are
    /// never taken for replicas), under a quota they contend for.
    #[test]
    fn replicas_plan_as_if_each_were_made_alone() {
        let offers = vec![
            offer(
                Cloud::Aws,
                "use1-az1",
                "a100.box",
                "A100",
                1,
                Capacity::OnDemand,
                2.0,
            ),
            offer(
                Cloud::Aws,
                "use1-az1",
                "a100.box",
                "A100",
                1,
                Capacity::Spot,
                0.8,
            ),
            offer(
                Cloud::Gcp,
                "us-central1-a",
                "a2-highgpu-1g",
                "A100",
                1,
                Capacity::OnDemand,
                2.5,
            ),
            offer(
                Cloud::Gcp,
                "us-central1-a",
                "v100.box",
                "V100",
                1,
                Capacity::OnDemand,
                1.0,
            ),
        ];
        let speeds = [("A100", 1.0), ("V100", 0.4)];
        let templates = [
            job("t0", &["A100"], 36_000.0, Some(30.0), &speeds),
            job("t1", &["A100", "V100"], 20_000.0, None, &speeds),
        ];
        let shared: Vec<PlanJob> = (0..7)
            .map(|i| {
                let mut j = templates[i % 2].clone();
                j.name = format!("job-{i}");
                j
            })
            .collect();
        let own: Vec<PlanJob> = shared
            .iter()
            .map(|j| {
                let mut j = j.clone();
                j.model = Arc::new(Table(
                    speeds.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                ));
                j
            })
            .collect();
        let options = PlanOptions {
            quotas: vec![aws_quota("A100", 3)],
            ..Default::default()
        };
        let json = |jobs: &[PlanJob]| {
            let mut v = serde_json::to_value(plan(jobs, &offers, &options)).unwrap();
            v.as_object_mut().unwrap().remove("solve_ms");
            v
        };
        let (with, without) = (json(&shared), json(&own));
        // Four of t0 on its three A100 offers, three of t1 on all four.
        assert_eq!(with["candidates"]["generated"], 4 * 3 + 3 * 4, "{with:#}");
        assert_eq!(with["placed"], 7);
        assert_eq!(with, without);
    }
}
