-- Health of workers and agent processes, as the panel's health sweep sees
-- it: the restart counter and process start last seen per agent and worker
-- (worker '' is the agent process itself), and each restart or start seen
-- since, so "3 restarts within 15 minutes" is counted from stored state
-- and survives a panel restart. Restarts older than a day are pruned.
CREATE TABLE worker_health (
    tenant_id     uuid NOT NULL DEFAULT app_tenant(),
    agent_id      uuid NOT NULL,
    worker        text NOT NULL,
    restarts_seen integer NOT NULL DEFAULT 0,
    started_at    timestamptz,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, agent_id, worker)
);

CREATE TABLE worker_restarts (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id uuid NOT NULL DEFAULT app_tenant(),
    agent_id  uuid NOT NULL,
    worker    text NOT NULL,
    at        timestamptz NOT NULL
);
CREATE INDEX worker_restarts_recent ON worker_restarts (tenant_id, agent_id, worker, at);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['worker_health', 'worker_restarts'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY %I ON %I USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant())', t || '_tenant', t);
    END LOOP;
END $$;
