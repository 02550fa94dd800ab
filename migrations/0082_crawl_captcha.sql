-- Captcha solver authorisations (docs/CRAWL.md, "Captchas";
-- docs/LAW_REGISTER.md): a solver may be used for a tenant only while an
-- authorisation is recorded — who, when, and the reference to the written
-- permission — and audited. No solver adapter ships; revoking ends use.
CREATE TABLE crawl_captcha_auth (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id        uuid NOT NULL REFERENCES tenants (id),
    solver           text NOT NULL CHECK (solver ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    endpoint         text NOT NULL,
    -- The solver's API key, sealed by the vault (bound to the row's id).
    api_key          bytea,
    reference        text NOT NULL CHECK (length(btrim(reference)) >= 3),
    authorised_by    text NOT NULL,
    authorised_by_id uuid,
    authorised_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    revoked_by       text,
    revoked_at       timestamptz
);
-- One authorisation in force per tenant.
CREATE UNIQUE INDEX crawl_captcha_auth_active ON crawl_captcha_auth (tenant_id) WHERE revoked_at IS NULL;
ALTER TABLE crawl_captcha_auth ENABLE ROW LEVEL SECURITY;
ALTER TABLE crawl_captcha_auth FORCE ROW LEVEL SECURITY;
CREATE POLICY crawl_captcha_auth_tenant ON crawl_captcha_auth USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());

-- Pages of a run that showed a captcha (a person must look unless a solver
-- is authorised).
ALTER TABLE crawl_runs ADD COLUMN captchas integer NOT NULL DEFAULT 0;
