-- Page tasks relayed between panel replicas (docs/CRAWL.md, "Runs across
-- replicas"): a run on one replica hands a page to an agent connected to
-- another through this table and a NOTIFY; the holder answers in the same
-- row. Rows live for seconds; credentials in a task are sealed by the vault.
CREATE UNLOGGED TABLE crawl_relay (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    agent_id     uuid NOT NULL,
    from_replica uuid NOT NULL,
    task         jsonb NOT NULL,
    -- The proxy's credentials of the task, sealed by the vault.
    creds        bytea,
    result       jsonb,
    error        text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    answered_at  timestamptz
);
CREATE INDEX crawl_relay_created ON crawl_relay (created_at);
ALTER TABLE crawl_relay ENABLE ROW LEVEL SECURITY;
ALTER TABLE crawl_relay FORCE ROW LEVEL SECURITY;
CREATE POLICY crawl_relay_tenant ON crawl_relay USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
