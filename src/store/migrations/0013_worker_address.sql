-- Where each node stands among its incarnation's, for jobs whose nodes must find each other
-- (`[run] node_env = "skypilot"`): the address its agent gave when its workers started (its
-- private IP), and its rank, in the order the nodes first started in the incarnation.
ALTER TABLE workers ADD COLUMN address TEXT;
ALTER TABLE workers ADD COLUMN node_rank BIGINT;
