-- Each event's typed fields as JSON (`controller::Event`, tagged by `event`), beside its kind
-- and rendered message, so tools and tests read decisions as values. NULL for events written
-- before this migration. Same text for SQLite and PostgreSQL.
ALTER TABLE events ADD COLUMN fields TEXT;
