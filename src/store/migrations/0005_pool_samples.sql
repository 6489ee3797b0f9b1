-- Spot availability of each pool (instance type in a zone) per policy tick: what the deadline
-- policy learns each zone's hazard from. Kept so a restarted controller does not start its
-- learning from nothing; old ticks are pruned.
CREATE TABLE pool_samples (
    pool          TEXT NOT NULL,
    instance_type TEXT NOT NULL,
    zone          TEXT NOT NULL,
    region        TEXT NOT NULL,
    tick          BIGINT NOT NULL,
    available     BIGINT NOT NULL,
    spot_price    DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (pool, tick)
);
CREATE INDEX pool_samples_by_tick ON pool_samples (tick);
