-- The fleet size the planner chose for a job. `target_count` may be smaller for a while: an
-- elastic job resized down to its survivors when spot ran out grows back to this.
ALTER TABLE jobs ADD COLUMN planned_count BIGINT NOT NULL DEFAULT 0;
