-- Notification channels: where alarms reach a person besides the console
-- and the log. Installation-wide, set by an admin. A webhook's signing
-- secret is sealed with the panel's secret key (app/vault), bound to the
-- channel's id, and shown once at creation.
CREATE TABLE notify_channels (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    kind         text NOT NULL CHECK (kind IN ('webhook', 'email')),
    target       text NOT NULL CHECK (length(target) BETWEEN 3 AND 500),
    secret_box   bytea,
    min_severity text NOT NULL DEFAULT 'warning' CHECK (min_severity IN ('info', 'warning', 'critical')),
    enabled      boolean NOT NULL DEFAULT true,
    created_by   text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- What each channel was sent: one row per alarm event and channel, so a
-- panel restart neither loses nor repeats a message (the receiver also
-- gets the event id to drop a repeat after an uncertain send).
CREATE TABLE notify_deliveries (
    tenant_id  uuid NOT NULL DEFAULT app_tenant(),
    channel_id uuid NOT NULL REFERENCES notify_channels (id) ON DELETE CASCADE,
    event_id   bigint NOT NULL REFERENCES alarm_events (id) ON DELETE CASCADE,
    status     text NOT NULL CHECK (status IN ('sent', 'retrying', 'failed')),
    attempts   integer NOT NULL DEFAULT 0,
    last_error text,
    last_try   timestamptz,
    sent_at    timestamptz,
    PRIMARY KEY (channel_id, event_id)
);
CREATE INDEX notify_deliveries_tenant ON notify_deliveries (tenant_id, channel_id);

ALTER TABLE notify_deliveries ENABLE ROW LEVEL SECURITY;
ALTER TABLE notify_deliveries FORCE ROW LEVEL SECURITY;
CREATE POLICY notify_deliveries_tenant ON notify_deliveries
    USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
