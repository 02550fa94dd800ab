-- Audit checkpoints (issue 15, item 7): whole audit entries past their
-- retention are dropped only behind a checkpoint. A checkpoint records the
-- seal (chain, seq, hash) the chain stands on at that point; it is written
-- only if it matches the seal as stored, anchored to the file outside the
-- database before anything is dropped, and never changed. Verification then
-- starts from the latest checkpoint's hash instead of from nothing, so a
-- chain with its old entries dropped still verifies — and one whose entries
-- were dropped without a checkpoint still does not.
CREATE TABLE audit_checkpoints (
    chain        uuid NOT NULL,
    seq          bigint NOT NULL CHECK (seq > 0),
    hash         bytea NOT NULL,
    -- The newest entry time it covers, for people.
    covers_until timestamptz NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (chain, seq)
);
CREATE TRIGGER audit_checkpoints_no_update BEFORE UPDATE OR DELETE ON audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_checkpoints FROM ${app_role};
ALTER TABLE audit_checkpoints ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_checkpoints FORCE ROW LEVEL SECURITY;
CREATE POLICY audit_checkpoints_chain ON audit_checkpoints
    USING (chain = app_tenant() OR (SELECT app_cross_tenant())) WITH CHECK (chain = app_tenant());

-- A checkpoint must be the seal as stored: the database checks it, and
-- assigns its time.
CREATE FUNCTION audit_checkpoint_check() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM audit_seals WHERE chain = NEW.chain AND seq = NEW.seq AND hash = NEW.hash) THEN
        RAISE EXCEPTION 'audit checkpoint at seq % of chain % does not match its seal', NEW.seq, NEW.chain
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.at := clock_timestamp();
    RETURN NEW;
END $$;
CREATE TRIGGER audit_checkpoints_check BEFORE INSERT ON audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION audit_checkpoint_check();

-- The one way an audit entry or seal is ever deleted: audit_prune, running
-- as the tables' owner inside the chain's own transaction, drops the
-- entries and seals up to a checkpoint that exists. The application role
-- has no DELETE on either table; the guard below lets the owner's delete
-- through only while audit_prune runs.
CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND TG_TABLE_NAME IN ('audit_log', 'audit_seals')
       AND current_setting('fleet.audit_prune', true) = 'on'
       AND current_user = (SELECT tableowner FROM pg_tables WHERE schemaname = TG_TABLE_SCHEMA AND tablename = TG_TABLE_NAME) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit log is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE POLICY audit_log_prune ON audit_log FOR DELETE USING (tenant_id = app_tenant());

CREATE FUNCTION audit_prune(p_chain uuid, p_seq bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE n bigint;
BEGIN
    IF p_chain IS DISTINCT FROM app_tenant() THEN
        RAISE EXCEPTION 'audit prune: a chain is pruned only in its own transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM audit_checkpoints WHERE chain = p_chain AND seq = p_seq) THEN
        RAISE EXCEPTION 'audit prune: chain % has no checkpoint at seq %', p_chain, p_seq USING ERRCODE = 'check_violation';
    END IF;
    PERFORM set_config('fleet.audit_prune', 'on', true);
    DELETE FROM audit_log WHERE tenant_id = p_chain
        AND id IN (SELECT entry_id FROM audit_seals WHERE chain = p_chain AND seq <= p_seq);
    GET DIAGNOSTICS n = ROW_COUNT;
    DELETE FROM audit_seals WHERE chain = p_chain AND seq <= p_seq;
    PERFORM set_config('fleet.audit_prune', 'off', true);
    RETURN n;
END $$;
REVOKE ALL ON FUNCTION audit_prune(uuid, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION audit_prune(uuid, bigint) TO ${app_role};
