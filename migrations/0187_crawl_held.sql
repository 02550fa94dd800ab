-- A run held by the fleet's or its tenant's pause switch: since when, and
-- which switch holds it (empty while nothing holds it).
ALTER TABLE crawl_runs ADD COLUMN held_since timestamptz;
ALTER TABLE crawl_runs ADD COLUMN held_reason text NOT NULL DEFAULT '';
