-- Prices as the controller saw them, per offer (cloud/zone/type/capacity), changes only: cost
-- reports bill each usage interval piecewise at the prices that held over it, never at
-- today's catalog.
CREATE TABLE prices (
    offer_key      TEXT NOT NULL,
    at             BIGINT NOT NULL,
    price_per_hour DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (offer_key, at)
);
-- What the planner expected the job to cost when it first placed it (the report's plan column).
ALTER TABLE jobs ADD COLUMN planned_cost DOUBLE PRECISION;
-- The cost counter reads open intervals and those ended since its last look.
CREATE INDEX usage_by_end ON usage (ended_at);
