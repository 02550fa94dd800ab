-- Platforms per tenant (docs/ADAPTERS.md, "Platforms per tenant"): a
-- tenant's platform specs with every version kept (source as written, its
-- SHA-256, who and when), the version each account runs (no row: the
-- shipped sandbox, built into the agent), and the recorded review a real
-- target needs before it may claim (docs/LAW_REGISTER.md). Tenant-owned,
-- under FORCEd row-level security like everything a tenant has.
CREATE TABLE platforms (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id       uuid NOT NULL REFERENCES tenants (id),
    name            text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    -- The newest version stored (accounts move to it only when told).
    latest_version  integer NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name),
    UNIQUE (tenant_id, id)
);

CREATE TABLE platform_versions (
    tenant_id     uuid NOT NULL REFERENCES tenants (id),
    platform_id   uuid NOT NULL,
    version       integer NOT NULL CHECK (version >= 1),
    source        text NOT NULL,
    -- Hex SHA-256 of source: what the protocol's platform.digest carries.
    digest        text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    -- The text is one of the sandbox specs this build ships (compared by
    -- digest when stored): such a version needs no review.
    shipped       boolean NOT NULL DEFAULT false,
    created_by    text NOT NULL DEFAULT '',
    created_by_id uuid,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (platform_id, version),
    UNIQUE (tenant_id, platform_id, version),
    FOREIGN KEY (tenant_id, platform_id) REFERENCES platforms (tenant_id, id)
);

-- The platform version an account runs. No row: the shipped sandbox.
-- Moving an account is an audited action; a new version never moves one.
CREATE TABLE account_platforms (
    tenant_id   uuid NOT NULL REFERENCES tenants (id),
    account_id  uuid PRIMARY KEY,
    platform_id uuid NOT NULL,
    version     integer NOT NULL,
    set_by      text NOT NULL DEFAULT '',
    set_at      timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, account_id) REFERENCES accounts (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, platform_id, version) REFERENCES platform_versions (tenant_id, platform_id, version)
);
CREATE INDEX account_platforms_platform ON account_platforms (tenant_id, platform_id, version);

-- The review of a real target (docs/LAW_REGISTER.md): who recorded it,
-- when, and the reference to the written permission or legal advice. One
-- in force per platform; withdrawing it stops that platform's claims.
CREATE TABLE platform_reviews (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id      uuid NOT NULL REFERENCES tenants (id),
    platform_id    uuid NOT NULL,
    reference      text NOT NULL CHECK (length(btrim(reference)) >= 3),
    note           text NOT NULL DEFAULT '',
    reviewed_by    text NOT NULL,
    reviewed_by_id uuid,
    reviewed_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    withdrawn_by   text,
    withdrawn_at   timestamptz,
    FOREIGN KEY (tenant_id, platform_id) REFERENCES platforms (tenant_id, id)
);
CREATE UNIQUE INDEX platform_reviews_active ON platform_reviews (platform_id) WHERE withdrawn_at IS NULL;

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['platforms', 'platform_versions', 'account_platforms', 'platform_reviews'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY %I ON %I USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant())', t || '_tenant', t);
    END LOOP;
END $$;

-- platform_claims_ok(agent): the agent's account may claim as far as its
-- platform goes: it runs the shipped sandbox (no row, or a shipped text),
-- or its platform has a review in force. Read by the lease, grant and act
-- statements beside the pause switch (two index probes), so recording or
-- withdrawing a review takes effect at the next statement on any replica.
CREATE FUNCTION platform_claims_ok(agent uuid) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NOT EXISTS (SELECT 1 FROM agents ag
        JOIN account_platforms ap ON ap.account_id = ag.account_id
        JOIN platform_versions v ON v.platform_id = ap.platform_id AND v.version = ap.version
        WHERE ag.id = agent AND NOT v.shipped
          AND NOT EXISTS (SELECT 1 FROM platform_reviews r WHERE r.platform_id = ap.platform_id AND r.withdrawn_at IS NULL)) $$;
