-- A restore never books twice (docs/CLAIMS.md, "A restore never books
-- twice"). On a restored database every load of the lost history is in
-- doubt: for each tenant that existed at the restore, no lease is granted
-- until a complete look-up of the client's bookings has been applied as
-- evidence, recorded here (Store.ClearRestore).
CREATE TABLE claim_restore_clears (
    tenant_id  uuid NOT NULL REFERENCES tenants(id),
    restore_id bigint NOT NULL REFERENCES restores(id),
    cleared_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    lookup_id  text NOT NULL,
    -- The look-up's bookings, and how many of them changed a claim.
    bookings   integer NOT NULL,
    applied    integer NOT NULL,
    PRIMARY KEY (tenant_id, restore_id)
);
ALTER TABLE claim_restore_clears ENABLE ROW LEVEL SECURITY;
ALTER TABLE claim_restore_clears FORCE ROW LEVEL SECURITY;
CREATE POLICY claim_restore_clears_tenant ON claim_restore_clears
    USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
GRANT SELECT, INSERT ON claim_restore_clears TO ${app_role};

-- claim_restore_held(t): a restore is recorded that tenant t existed
-- before and has not been cleared for it. Read by the lease and grant
-- statements (a tiny table and an index probe).
CREATE FUNCTION claim_restore_held(t uuid) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT EXISTS (SELECT 1 FROM restores r
        WHERE r.restored_at > (SELECT created_at FROM tenants WHERE id = t)
          AND NOT EXISTS (SELECT 1 FROM claim_restore_clears c WHERE c.tenant_id = t AND c.restore_id = r.id)) $$;
