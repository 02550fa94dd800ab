-- Tenants are the operators' clients. Every tenant-owned row carries
-- tenant_id and lives under FORCEd row-level security keyed on app_tenant(),
-- which the panel sets per transaction with set_config('app.tenant_id', $1, true).
CREATE TABLE tenants (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    slug       text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{1,62}$'),
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The tenant of the current transaction, or NULL when none is set. After a
-- transaction that set it ends, the setting reads '' (not NULL) on that
-- pooled connection: NULLIF keeps both cases at "no tenant, no rows".
CREATE FUNCTION app_tenant() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('app.tenant_id', true), '')::uuid $$;
