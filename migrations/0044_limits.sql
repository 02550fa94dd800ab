-- Limits (issue 15, item 5): per tenant and global caps on the work the
-- fleet does. One row per (tenant, name); the global limits live on the
-- all-zero tenant (the audit log's system chain). The lowest of the task's,
-- the tenant's and the global limit applies, so every tenant's transaction
-- may read the global rows too; it may write only its own.
CREATE TABLE limits (
    tenant_id  uuid NOT NULL DEFAULT app_tenant(),
    name       text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_]*$' AND length(name) <= 60),
    value      bigint NOT NULL CHECK (value >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
ALTER TABLE limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE limits FORCE ROW LEVEL SECURITY;
CREATE POLICY limits_read ON limits FOR SELECT
    USING (tenant_id = app_tenant() OR tenant_id = '00000000-0000-0000-0000-000000000000'::uuid OR (SELECT app_cross_tenant()));
CREATE POLICY limits_write ON limits FOR INSERT WITH CHECK (tenant_id = app_tenant());
CREATE POLICY limits_update ON limits FOR UPDATE USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
CREATE POLICY limits_delete ON limits FOR DELETE USING (tenant_id = app_tenant());
