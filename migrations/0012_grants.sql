-- Which tenants an operator or viewer may reach (admins reach every tenant).
-- Tenant-owned, so under FORCEd row-level security: a tenant's transaction
-- sees its own grants; a user's transaction (app.user_id) sees that user's
-- grants, which is how a session learns its reach; the admin path
-- (app_cross_tenant) sees them all.
CREATE TABLE tenant_grants (
    tenant_id  uuid NOT NULL REFERENCES tenants (id),
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id)
);
CREATE INDEX tenant_grants_user ON tenant_grants (user_id);
ALTER TABLE tenant_grants ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_grants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_grants_read ON tenant_grants FOR SELECT
    USING (tenant_id = app_tenant() OR user_id = app_user() OR (SELECT app_cross_tenant()));
CREATE POLICY tenant_grants_insert ON tenant_grants FOR INSERT
    WITH CHECK (tenant_id = app_tenant());
CREATE POLICY tenant_grants_delete ON tenant_grants FOR DELETE
    USING (tenant_id = app_tenant());

-- A tenant's members, for its pages. security_invoker: the view applies the
-- caller's row-level security, never its owner's.
CREATE VIEW tenant_members WITH (security_invoker = true) AS
    SELECT g.tenant_id, u.id AS user_id, u.email, u.role, g.created_at AS granted_at
    FROM tenant_grants g JOIN users u ON u.id = g.user_id;
