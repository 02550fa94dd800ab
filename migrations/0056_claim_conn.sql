-- A lost connection is a connection, not an agent (docs/CLAIMS.md). Each
-- claim remembers the agent connection that leased it, or that started its
-- action: when a connection ends, the gateway settles only that
-- connection's claims, never those of the same agent's newer connection.
-- The id comes from the statement's transaction (set_config('app.conn',
-- …, true), beside the tenant scope), so the lease and act statements
-- themselves do not change.
ALTER TABLE claims ADD COLUMN holder_conn uuid;
ALTER TABLE claims_archive ADD COLUMN holder_conn uuid;
CREATE INDEX claims_holder_conn ON claims (tenant_id, holder_conn) WHERE state IN ('LEASED', 'ACTING');

CREATE FUNCTION claim_holder_conn() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    conn uuid := NULLIF(current_setting('app.conn', true), '')::uuid;
BEGIN
    IF TG_OP = 'INSERT' OR NEW.token <> OLD.token THEN
        -- A new lease belongs to the connection that asked for it (none
        -- known: NULL, settled only with the whole agent).
        NEW.holder_conn := conn;
    ELSIF OLD.state = 'LEASED' AND NEW.state = 'ACTING' AND conn IS NOT NULL THEN
        -- The action belongs to the connection that started it (an agent
        -- that reconnected acts on a lease from its previous connection).
        NEW.holder_conn := conn;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER claims_holder_conn BEFORE INSERT OR UPDATE ON claims
    FOR EACH ROW EXECUTE FUNCTION claim_holder_conn();
