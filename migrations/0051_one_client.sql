-- One tenant, one platform client (issue 11, item 8; docs/CLAIMS.md). Every
-- account of a tenant books as the same client on the same board: the
-- reconciler and the duplicate sweep read "the client's bookings", and a
-- look-up through an account of another client would answer "no booking"
-- for a booking that exists. The rule is kept here, whatever path writes an
-- account (console, seeding, a script), and each attempt records the client
-- it booked as, so its look-ups go to an account of that client only.

-- The platform client the account books as ('' for accounts made before
-- this rule: not stated).
ALTER TABLE accounts ADD COLUMN client text NOT NULL DEFAULT ''
    CHECK (length(client) <= 200);

-- After the statement's rows are written (an AFTER row trigger runs at the
-- end of its statement, so one UPDATE may move every account of a tenant
-- at once), no other account of the tenant may name another client or
-- board. The advisory lock serialises the check per tenant: of two
-- accounts created at once with different clients, the second waits for
-- the first to commit and then sees it.
CREATE FUNCTION accounts_one_client() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    other record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('fleet.accounts.client:' || NEW.tenant_id::text, 0));
    SELECT a.account_key, a.client, a.board_url INTO other
    FROM accounts a
    WHERE a.tenant_id = NEW.tenant_id AND a.id <> NEW.id
      AND (a.client <> NEW.client OR rtrim(a.board_url, '/') <> rtrim(NEW.board_url, '/'))
    ORDER BY a.created_at, a.account_key
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%', format('account %s books as %s on %s', other.account_key,
                CASE WHEN other.client = '' THEN 'an unstated client' ELSE format('client "%s"', other.client) END,
                other.board_url)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_one_client',
                  DETAIL = other.account_key,
                  HINT = 'every account of a tenant books as the same client on the same board';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER accounts_one_client AFTER INSERT OR UPDATE OF client, board_url ON accounts
    FOR EACH ROW EXECUTE FUNCTION accounts_one_client();

-- The client and board each attempt booked as, from its holder's account
-- when the lease opened it (NULL: unknown, e.g. an attempt made before this
-- rule; its look-ups then use the tenant's one client).
ALTER TABLE claim_attempts
    ADD COLUMN client    text,
    ADD COLUMN board_url text;

CREATE FUNCTION claim_attempt_client() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    SELECT NULLIF(ac.client, ''), CASE WHEN ac.client <> '' THEN ac.board_url END
    INTO NEW.client, NEW.board_url
    FROM agents ag JOIN accounts ac ON ac.tenant_id = ag.tenant_id AND ac.id = ag.account_id
    WHERE ag.tenant_id = NEW.tenant_id AND ag.id = NEW.holder_agent;
    RETURN NEW;
END $$;
CREATE TRIGGER claim_attempts_client BEFORE INSERT ON claim_attempts
    FOR EACH ROW EXECUTE FUNCTION claim_attempt_client();
