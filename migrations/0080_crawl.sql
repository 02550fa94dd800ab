-- Crawl jobs (docs/CRAWL.md): every version kept, runs, and the items they
-- found with first and last sighting and a change hash. Tenant-owned, under
-- FORCEd row-level security like everything a tenant has.
CREATE TABLE crawl_jobs (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id       uuid NOT NULL REFERENCES tenants (id),
    name            text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    current_version integer NOT NULL DEFAULT 1,
    paused          boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name),
    UNIQUE (tenant_id, id)
);

-- Every version of a job as written (source, for diffs) and as parsed.
CREATE TABLE crawl_job_versions (
    tenant_id  uuid NOT NULL REFERENCES tenants (id),
    job_id     uuid NOT NULL,
    version    integer NOT NULL CHECK (version >= 1),
    source     text NOT NULL,
    spec       jsonb NOT NULL,
    created_by text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, version),
    FOREIGN KEY (tenant_id, job_id) REFERENCES crawl_jobs (tenant_id, id)
);

CREATE TABLE crawl_runs (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   uuid NOT NULL REFERENCES tenants (id),
    job_id      uuid NOT NULL,
    version     integer NOT NULL,
    state       text NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'stopped', 'failed')),
    -- Why it ended: "done", "limit: pages", "limit: run_time", an error…
    reason      text NOT NULL DEFAULT '',
    trigger     text NOT NULL DEFAULT '',
    queued_at   timestamptz NOT NULL DEFAULT now(),
    started_at  timestamptz,
    finished_at timestamptz,
    pages       integer NOT NULL DEFAULT 0,
    items       integer NOT NULL DEFAULT 0,
    new_items   integer NOT NULL DEFAULT 0,
    changed_items integer NOT NULL DEFAULT 0,
    errors      integer NOT NULL DEFAULT 0,
    selector_failures integer NOT NULL DEFAULT 0,
    bytes       bigint NOT NULL DEFAULT 0,
    -- Per domain: {"host": {"requests": n, "errors": n, "throttled": n, "ms": total}}.
    domains     jsonb NOT NULL DEFAULT '{}',
    -- A bounded snapshot of the first listing page (for alarm traces).
    trace       jsonb,
    FOREIGN KEY (tenant_id, job_id) REFERENCES crawl_jobs (tenant_id, id)
);
-- Runs of one job never overlap.
CREATE UNIQUE INDEX crawl_runs_one_active ON crawl_runs (job_id) WHERE state IN ('queued', 'running');
CREATE INDEX crawl_runs_job ON crawl_runs (tenant_id, job_id, queued_at DESC);

CREATE TABLE crawl_items (
    tenant_id   uuid NOT NULL REFERENCES tenants (id),
    job_id      uuid NOT NULL,
    key         text NOT NULL,
    data        jsonb NOT NULL,
    -- SHA-256 of the canonical JSON of data: a change is a new hash.
    hash        bytea NOT NULL,
    first_seen  timestamptz NOT NULL,
    last_seen   timestamptz NOT NULL,
    changed_at  timestamptz NOT NULL,
    first_run   uuid NOT NULL,
    last_run    uuid NOT NULL,
    PRIMARY KEY (tenant_id, job_id, key),
    FOREIGN KEY (tenant_id, job_id) REFERENCES crawl_jobs (tenant_id, id)
);
CREATE INDEX crawl_items_last_run ON crawl_items (tenant_id, job_id, last_run);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['crawl_jobs', 'crawl_job_versions', 'crawl_runs', 'crawl_items'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY %I ON %I USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant())', t || '_tenant', t);
    END LOOP;
END $$;

-- A tenant's egress allowlist (admin-only, audited): internal ranges and
-- extra ports its crawls may reach through the SSRF guard (docs/EGRESS.md).
CREATE TABLE tenant_egress (
    tenant_id  uuid PRIMARY KEY REFERENCES tenants (id),
    allow      text[] NOT NULL DEFAULT '{}',
    ports      integer[] NOT NULL DEFAULT '{}',
    updated_by text NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE tenant_egress ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_egress FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_egress_tenant ON tenant_egress USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());

-- The trace an alarm saved: which rule failed, and the run's evidence (URL,
-- status, redacted headers, a bounded body snapshot, a screenshot in browser
-- mode).
CREATE TABLE crawl_traces (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    job_id    uuid NOT NULL,
    run_id    uuid NOT NULL,
    rule      text NOT NULL,
    detail    text NOT NULL,
    trace     jsonb NOT NULL DEFAULT '{}',
    at        timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, job_id) REFERENCES crawl_jobs (tenant_id, id)
);
CREATE INDEX crawl_traces_job ON crawl_traces (tenant_id, job_id, id DESC);
ALTER TABLE crawl_traces ENABLE ROW LEVEL SECURITY;
ALTER TABLE crawl_traces FORCE ROW LEVEL SECURITY;
CREATE POLICY crawl_traces_tenant ON crawl_traces USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
