-- The append-only audit log. Every entry belongs to one chain: a tenant's id,
-- or the all-zero uuid for the system chain (operators, sign-ins, tenants).
-- tenant_id has no foreign key on purpose: nothing may cascade into it.
CREATE TABLE audit_log (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id uuid NOT NULL DEFAULT app_tenant(),
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor_id  uuid,
    actor     text NOT NULL,
    action    text NOT NULL CHECK (action ~ '^[a-z][a-z0-9_.]*$'),
    target    text NOT NULL DEFAULT '',
    detail    jsonb NOT NULL DEFAULT '{}',
    ip        text NOT NULL DEFAULT '',
    -- The appending transaction: the sealer takes entries in transaction
    -- order once every transaction below its horizon has ended.
    txid      xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX audit_log_tenant_txid ON audit_log (tenant_id, txid, id);
CREATE INDEX audit_log_at ON audit_log (at DESC, id DESC);

CREATE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit log is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM ${app_role};

-- Seals: the hash chain, written by the sealer after the entries commit, so
-- appending costs one INSERT and never waits for another tenant. The hash of
-- seal n is SHA-256(hash of seal n-1 || canonical form of its entry).
CREATE TABLE audit_seals (
    chain    uuid NOT NULL,
    seq      bigint NOT NULL CHECK (seq > 0),
    entry_id bigint NOT NULL UNIQUE,
    hash     bytea NOT NULL,
    PRIMARY KEY (chain, seq)
);
CREATE TRIGGER audit_seals_no_update BEFORE UPDATE OR DELETE ON audit_seals
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_seals_no_truncate BEFORE TRUNCATE ON audit_seals
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_seals FROM ${app_role};

-- Where each chain's sealing stands: entries of transactions below horizon
-- are sealed. Bookkeeping only; verification trusts seals and anchors.
CREATE TABLE audit_chains (
    chain   uuid PRIMARY KEY,
    horizon xid8 NOT NULL DEFAULT '0'::xid8
);

-- The explicit cross-tenant path. A transaction may read across tenants only
-- after it appended an 'admin.cross_tenant' entry made by an active admin;
-- the trigger below (running as the owner) records that transaction here,
-- and app_cross_tenant() looks for it. The application role cannot write
-- this table, so there is no other way in.
CREATE TABLE audit_cross_tenant (
    txid xid8 PRIMARY KEY,
    at   timestamptz NOT NULL DEFAULT now()
);
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON audit_cross_tenant FROM ${app_role};

CREATE FUNCTION audit_open_cross_tenant() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NEW.action <> 'admin.cross_tenant' THEN
        RETURN NEW;
    END IF;
    IF NEW.tenant_id <> '00000000-0000-0000-0000-000000000000'::uuid
       OR NOT EXISTS (SELECT 1 FROM users WHERE id = NEW.actor_id AND role = 'admin' AND disabled_at IS NULL) THEN
        RAISE EXCEPTION 'cross-tenant access needs an active admin, recorded on the system chain'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO audit_cross_tenant (txid) VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
    DELETE FROM audit_cross_tenant WHERE at < now() - interval '1 day';
    RETURN NEW;
END $$;
CREATE TRIGGER audit_log_cross_tenant AFTER INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_open_cross_tenant();

CREATE FUNCTION app_cross_tenant() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT EXISTS (SELECT 1 FROM audit_cross_tenant WHERE txid = pg_current_xact_id_if_assigned()) $$;

ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_log FORCE ROW LEVEL SECURITY;
CREATE POLICY audit_log_read ON audit_log FOR SELECT
    USING (tenant_id = app_tenant() OR (SELECT app_cross_tenant()));
-- Appending only ever goes to the transaction's own chain.
CREATE POLICY audit_log_append ON audit_log FOR INSERT
    WITH CHECK (tenant_id = app_tenant());
