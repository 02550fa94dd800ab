-- One booking identity per job (docs/CLAIMS.md, "One booking identity per
-- job"). The booking key is written once with the panel's record of the job
-- and sent as the Idempotency-Key on every attempt of that job, so a board
-- that honours keys replays a second attempt instead of booking it twice.
-- The operation id stays unique per lease: the agent's journal and outbox
-- key on it.
ALTER TABLE claim_jobs ADD COLUMN booking_key uuid NOT NULL DEFAULT gen_random_uuid();

-- Whether a platform honours idempotency keys, per tenant (default: no).
-- Set by an admin, audited; the sandbox adapter compares it with the board's
-- own status and refuses to claim when they disagree.
CREATE TABLE claim_platform_settings (
    tenant_id           uuid NOT NULL REFERENCES tenants(id),
    platform            text NOT NULL CHECK (platform ~ '^[a-z0-9][a-z0-9_-]{0,39}$'),
    honours_idempotency boolean NOT NULL DEFAULT false,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    updated_by          text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, platform)
);
ALTER TABLE claim_platform_settings ENABLE ROW LEVEL SECURITY;
ALTER TABLE claim_platform_settings FORCE ROW LEVEL SECURITY;
CREATE POLICY claim_platform_settings_tenant ON claim_platform_settings
    USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());

-- The platforms a tenant books on: the adapters its accounts' workers name
-- (worker setting "platform", default "sandbox"); "sandbox" when it has no
-- account yet.
CREATE FUNCTION claim_tenant_platforms(t uuid) RETURNS SETOF text
    LANGUAGE sql STABLE AS $$
    WITH used AS (
        SELECT COALESCE(NULLIF(w->'settings'->>'platform', ''), 'sandbox') AS name
        FROM accounts a CROSS JOIN LATERAL jsonb_array_elements(
            CASE WHEN jsonb_typeof(a.workers) = 'array' THEN a.workers ELSE '[]'::jsonb END) w
        WHERE a.tenant_id = t)
    SELECT DISTINCT name FROM used
    UNION
    SELECT 'sandbox' WHERE NOT EXISTS (SELECT 1 FROM used) $$;

-- True only when every platform the tenant books on honours idempotency
-- keys by the tenant's setting (a platform without a setting does not).
CREATE FUNCTION claim_keys_honoured(t uuid) RETURNS boolean
    LANGUAGE sql STABLE AS $$
    SELECT COALESCE(bool_and(COALESCE(s.honours_idempotency, false)), false)
    FROM claim_tenant_platforms(t) p(name)
    LEFT JOIN claim_platform_settings s ON s.tenant_id = t AND s.platform = p.name $$;
