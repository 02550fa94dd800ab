-- A person's hand on an open alarm: acknowledged (someone is on it: who and
-- when), silenced until a time (not counted in the attention strip, not
-- notified again, even when the same condition resolves and opens again
-- before then: a new row of the same tenant, kind and key inherits the
-- silence from the latest one still silenced).
ALTER TABLE alarms
    ADD COLUMN acknowledged_at timestamptz,
    ADD COLUMN acknowledged_by text,
    ADD COLUMN silenced_at     timestamptz,
    ADD COLUMN silenced_until  timestamptz,
    ADD COLUMN silenced_by     text;
CREATE INDEX alarms_silenced ON alarms (tenant_id, kind, key, silenced_until DESC) WHERE silenced_until IS NOT NULL;
