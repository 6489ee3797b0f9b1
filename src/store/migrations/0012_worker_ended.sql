-- How a node's workers ended in an incarnation when they ended by themselves: `crashed` (a
-- failure exit status) or `hung` (no progress for the agent's hang timeout). A node whose
-- workers ended so alone in three incarnations in a row is quarantined (`controller::health`).
ALTER TABLE workers ADD COLUMN ended TEXT;
