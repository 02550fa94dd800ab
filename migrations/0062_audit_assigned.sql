-- The database, not the appender, decides when an audit entry was written
-- and where it stands in its chain: the application role could otherwise
-- insert an entry with a back-dated time or transaction id, which the
-- sealer (working forward from its horizon) would never seal, unseen.
--
-- 1. The application role may insert only the entry's content; giving id,
--    at or txid is refused outright (column privileges).
REVOKE INSERT ON audit_log FROM ${app_role};
GRANT INSERT (tenant_id, actor_id, actor, action, target, detail, ip) ON audit_log TO ${app_role};

-- 2. Whoever inserts (the owner too), time and transaction id are the
--    database's own, and the id comes from the identity sequence.
CREATE FUNCTION audit_assign() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.at := clock_timestamp();
    NEW.txid := pg_current_xact_id();
    RETURN NEW;
END $$;
CREATE TRIGGER audit_log_assign BEFORE INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_assign();
