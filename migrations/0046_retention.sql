-- Retention (issue 15, item 7): how many days each kind of a tenant's data
-- is kept. A tenant's own setting wins over the global one (stored on the
-- all-zero tenant), which wins over the built-in default
-- (docs/OPERATIONS.md, "Retention"). A daily schedule prunes past it.
CREATE TABLE retention (
    tenant_id  uuid NOT NULL DEFAULT app_tenant(),
    kind       text NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_]*$' AND length(kind) <= 60),
    -- 0 keeps that kind forever.
    days       integer NOT NULL CHECK (days >= 0 AND days <= 36500),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL,
    PRIMARY KEY (tenant_id, kind)
);
ALTER TABLE retention ENABLE ROW LEVEL SECURITY;
ALTER TABLE retention FORCE ROW LEVEL SECURITY;
CREATE POLICY retention_read ON retention FOR SELECT
    USING (tenant_id = app_tenant() OR tenant_id = '00000000-0000-0000-0000-000000000000'::uuid OR (SELECT app_cross_tenant()));
CREATE POLICY retention_write ON retention FOR INSERT WITH CHECK (tenant_id = app_tenant());
CREATE POLICY retention_update ON retention FOR UPDATE USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
CREATE POLICY retention_delete ON retention FOR DELETE USING (tenant_id = app_tenant());

CREATE INDEX agent_events_at ON agent_events (tenant_id, at);
CREATE INDEX claims_archive_archived ON claims_archive (tenant_id, archived_at);
CREATE INDEX alarms_resolved ON alarms (tenant_id, resolved_at) WHERE resolved_at IS NOT NULL;
