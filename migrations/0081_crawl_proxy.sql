-- Proxy pools per tenant (docs/CRAWL.md, "Proxy pools"): proxies with their
-- credentials sealed at rest by the panel's vault (never shown again), a
-- rotation policy per pool, and each proxy's health (error score, benches
-- with a growing cooldown, removal). Tenant-owned, under FORCEd RLS.
CREATE TABLE crawl_proxy_pools (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    name         text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    rotation     text NOT NULL DEFAULT 'sticky' CHECK (rotation IN ('sticky', 'round_robin', 'on_failure')),
    -- Internal ranges a proxy of this pool may sit in (admin-set, audited):
    -- a proxy's own address goes through the egress guard like a target.
    allow        text[] NOT NULL DEFAULT '{}',
    bench_after  integer NOT NULL DEFAULT 3 CHECK (bench_after BETWEEN 1 AND 100),
    cooldown_ms  bigint NOT NULL DEFAULT 30000 CHECK (cooldown_ms BETWEEN 100 AND 86400000),
    remove_after integer NOT NULL DEFAULT 5 CHECK (remove_after BETWEEN 1 AND 100),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name),
    UNIQUE (tenant_id, id)
);

CREATE TABLE crawl_proxies (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id     uuid NOT NULL REFERENCES tenants (id),
    pool_id       uuid NOT NULL,
    scheme        text NOT NULL CHECK (scheme IN ('http', 'https', 'socks5')),
    host          text NOT NULL CHECK (host <> ''),
    port          integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    username      text NOT NULL DEFAULT '',
    -- The password sealed by the vault, bound to the proxy's id.
    secret        bytea,
    state         text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'benched', 'removed')),
    score         double precision NOT NULL DEFAULT 0,
    failures      integer NOT NULL DEFAULT 0,
    benches       integer NOT NULL DEFAULT 0,
    benched_until timestamptz,
    last_error    text NOT NULL DEFAULT '',
    last_ok_at    timestamptz,
    last_fail_at  timestamptz,
    errors_total  bigint NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (pool_id, scheme, host, port, username),
    FOREIGN KEY (tenant_id, pool_id) REFERENCES crawl_proxy_pools (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX crawl_proxies_pool ON crawl_proxies (tenant_id, pool_id, created_at);

-- The egress each agent's crawler last used (the fleet page's column).
CREATE TABLE crawl_agent_egress (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    agent_id  uuid NOT NULL,
    pool      text NOT NULL DEFAULT '',
    proxy_id  uuid,
    label     text NOT NULL,
    at        timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, agent_id)
);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['crawl_proxy_pools', 'crawl_proxies', 'crawl_agent_egress'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY %I ON %I USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant())', t || '_tenant', t);
    END LOOP;
END $$;
