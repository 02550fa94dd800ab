-- Client addresses in the audit log (issue 15, item 7). No sealed audit row
-- ever changes, yet a client's address must not outlive its retention. So
-- the chained row (audit_log, covered by the hash chain) holds only a keyed
-- hash of the address, HMAC-SHA256 under a key of the calendar month (UTC),
-- as "YYYY-MM:<64 hex>"; the clear address lives in audit_addresses, beside
-- the chain and never hashed into it. Retention deletes the clear rows, and
-- later the month's key: from then on no one can link the hash to an
-- address, and deleting either never breaks `audit verify`.
--
-- Entries written before this migration keep their clear address in
-- audit_log.ip (sealed rows are never rewritten) until whole-entry
-- retention drops them behind a checkpoint. Adding the column with a
-- constant default rewrites no row (Postgres stores the default in the
-- catalogue), and the check below is NOT VALID: it binds new rows only.

-- The monthly keys: 32 random bytes each, sealed with the panel's secret
-- key (app/vault, bound to the month), created on demand. Global, like the
-- chain's scheme; the sealed value alone links nothing.
CREATE TABLE audit_address_keys (
    month      text PRIMARY KEY CHECK (month ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    sealed     bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
REVOKE UPDATE, TRUNCATE ON audit_address_keys FROM ${app_role};

ALTER TABLE audit_log ADD COLUMN ip_mac text NOT NULL DEFAULT ''
    CONSTRAINT audit_log_ip_mac_form CHECK (ip_mac = '' OR ip_mac ~ '^[0-9]{4}-(0[1-9]|1[0-2]):[0-9a-f]{64}$');
ALTER TABLE audit_log ADD CONSTRAINT audit_log_no_clear_ip CHECK (ip = '') NOT VALID;
COMMENT ON COLUMN audit_log.ip IS 'clear client address of entries written before migration 0120 only; newer entries keep it in audit_addresses';
COMMENT ON COLUMN audit_log.ip_mac IS 'HMAC-SHA256 of the client address under its month''s key (audit_address_keys), as YYYY-MM:hex';
GRANT INSERT (ip_mac) ON audit_log TO ${app_role};

-- The clear addresses, one per entry, in the entry's tenant (row-level
-- security like audit_log). Written only in the entry's own transaction,
-- at the entry's time; never changed; deleted by retention and erasure.
CREATE TABLE audit_addresses (
    entry_id  bigint PRIMARY KEY,
    tenant_id uuid NOT NULL DEFAULT app_tenant(),
    at        timestamptz NOT NULL,
    ip        text NOT NULL CHECK (ip <> '' AND length(ip) <= 100)
);
CREATE INDEX audit_addresses_at ON audit_addresses (tenant_id, at);
REVOKE INSERT, UPDATE, TRUNCATE ON audit_addresses FROM ${app_role};
GRANT INSERT (entry_id, tenant_id, ip) ON audit_addresses TO ${app_role};
ALTER TABLE audit_addresses ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_addresses FORCE ROW LEVEL SECURITY;
CREATE POLICY audit_addresses_read ON audit_addresses FOR SELECT
    USING (tenant_id = app_tenant() OR (SELECT app_cross_tenant()));
CREATE POLICY audit_addresses_insert ON audit_addresses FOR INSERT WITH CHECK (tenant_id = app_tenant());
CREATE POLICY audit_addresses_delete ON audit_addresses FOR DELETE USING (tenant_id = app_tenant());

-- A clear address belongs to an entry of its own chain appended in the same
-- transaction, and takes that entry's time: no one attaches an address to
-- an older entry, or back-dates one past its retention.
CREATE FUNCTION audit_address_assign() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT l.at INTO NEW.at FROM audit_log l
        WHERE l.id = NEW.entry_id AND l.tenant_id = NEW.tenant_id AND l.txid = pg_current_xact_id();
    IF NOT FOUND THEN
        RAISE EXCEPTION 'audit address: entry % is not one this transaction appended to chain %', NEW.entry_id, NEW.tenant_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER audit_addresses_assign BEFORE INSERT ON audit_addresses
    FOR EACH ROW EXECUTE FUNCTION audit_address_assign();
CREATE FUNCTION audit_address_refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit address: a recorded address is never changed, only deleted' USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_addresses_no_update BEFORE UPDATE ON audit_addresses
    FOR EACH ROW EXECUTE FUNCTION audit_address_refuse_update();

-- Whole entries dropped behind a checkpoint take their clear addresses
-- with them (0045's audit_prune, plus the first DELETE).
CREATE OR REPLACE FUNCTION audit_prune(p_chain uuid, p_seq bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE n bigint;
BEGIN
    IF p_chain IS DISTINCT FROM app_tenant() THEN
        RAISE EXCEPTION 'audit prune: a chain is pruned only in its own transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM audit_checkpoints WHERE chain = p_chain AND seq = p_seq) THEN
        RAISE EXCEPTION 'audit prune: chain % has no checkpoint at seq %', p_chain, p_seq USING ERRCODE = 'check_violation';
    END IF;
    DELETE FROM audit_addresses WHERE tenant_id = p_chain
        AND entry_id IN (SELECT entry_id FROM audit_seals WHERE chain = p_chain AND seq <= p_seq);
    PERFORM set_config('fleet.audit_prune', 'on', true);
    DELETE FROM audit_log WHERE tenant_id = p_chain
        AND id IN (SELECT entry_id FROM audit_seals WHERE chain = p_chain AND seq <= p_seq);
    GET DIAGNOSTICS n = ROW_COUNT;
    DELETE FROM audit_seals WHERE chain = p_chain AND seq <= p_seq;
    PERFORM set_config('fleet.audit_prune', 'off', true);
    RETURN n;
END $$;
