-- The measuring run of a job nobody had measured (JSON of `ProbeRecord`): what it ran on,
-- its bounds, when it started and ended, and what the plan did after it. Cost reports bill
-- its window as probe spend. Same text for SQLite and PostgreSQL.
ALTER TABLE jobs ADD COLUMN probe TEXT;
