-- Alarms: conditions a person must see (a hung or crash-looping worker, a
-- failing cell, a crawl that found nothing, a claim conflict). One row per
-- raising; while open, (tenant_id, kind, key) is unique, so raising the same
-- condition again refreshes the open row (de-duplication) instead of adding
-- one. System alarms live on the all-zero tenant, like the audit log's
-- system chain. tenant_id has no foreign key on purpose: an alarm about a
-- tenant outlives nothing but its retention.
CREATE TABLE alarms (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    uuid NOT NULL DEFAULT app_tenant(),
    kind         text NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_.]*$' AND length(kind) <= 100),
    key          text NOT NULL CHECK (length(key) BETWEEN 1 AND 300),
    severity     text NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    summary      text NOT NULL CHECK (length(summary) BETWEEN 1 AND 500),
    detail       text NOT NULL DEFAULT '',
    link         text NOT NULL DEFAULT '',
    raised_at    timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    -- How many times the condition was raised while this row was open.
    raised_count integer NOT NULL DEFAULT 1,
    resolved_at  timestamptz,
    resolved_by  text
);
CREATE UNIQUE INDEX alarms_open_key ON alarms (tenant_id, kind, key) WHERE resolved_at IS NULL;
CREATE INDEX alarms_recent ON alarms (tenant_id, raised_at DESC);

-- What happened to alarms, in order: the notifier delivers these (raised,
-- resolved) to the configured channels and records what it sent, so a
-- panel restart neither loses nor repeats a message.
CREATE TABLE alarm_events (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id uuid NOT NULL DEFAULT app_tenant(),
    alarm_id  bigint NOT NULL REFERENCES alarms (id) ON DELETE CASCADE,
    event     text NOT NULL CHECK (event IN ('raised', 'resolved')),
    at        timestamptz NOT NULL
);
CREATE INDEX alarm_events_alarm ON alarm_events (alarm_id);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['alarms', 'alarm_events'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY %I ON %I USING (tenant_id = app_tenant() OR (SELECT app_cross_tenant())) WITH CHECK (tenant_id = app_tenant())', t || '_tenant', t);
    END LOOP;
END $$;
