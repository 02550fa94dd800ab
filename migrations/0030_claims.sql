-- The claim engine. A claim is a tenant's hold on one job of the board,
-- keyed by (tenant_id, target_job_key); Postgres alone decides who holds it.

-- Pause switches: global (one row) and per tenant. Checked inside the
-- statements that grant a lease and that start an action, so a lease granted
-- just before a pause cannot start acting after it.
CREATE TABLE fleet_switches (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    paused     boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO fleet_switches DEFAULT VALUES;
ALTER TABLE tenants ADD COLUMN paused boolean NOT NULL DEFAULT false;

-- Fencing tokens: monotonic across the whole system.
CREATE SEQUENCE claim_token AS bigint;

CREATE TABLE claims (
    tenant_id        uuid NOT NULL REFERENCES tenants(id),
    target_job_key   text NOT NULL CHECK (length(target_job_key) BETWEEN 1 AND 200),
    state            text NOT NULL CHECK (state IN ('LEASED','ACTING','CONFIRMED','TAKEN','UNKNOWN','RELEASED')),
    token            bigint NOT NULL,
    holder_agent     uuid NOT NULL,
    holder_worker    text NOT NULL,
    -- The operation id names one attempt at the board: it is journaled by the
    -- agent before it acts and sent as the idempotency key where honoured.
    operation_id     uuid NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    act_deadline     timestamptz,
    -- Last outcome reported for this key (NOT_SENT leaves the claim RELEASED).
    outcome          text CHECK (outcome IN ('CONFIRMED','TAKEN','NOT_SENT','UNKNOWN','RELEASED')),
    outcome_detail   text,
    attempts         integer NOT NULL DEFAULT 1,
    -- The six timestamps; agent ones are already corrected by the measured
    -- clock offset, and the bound of that correction is kept beside them.
    published_at     timestamptz,
    seen_at          timestamptz,
    queued_at        timestamptz,
    leased_at        timestamptz NOT NULL,
    act_started_at   timestamptz,
    act_sent_at      timestamptz,
    confirmed_at     timestamptz,
    clock_error_ms   integer,
    -- Settled keys are kept until the load has expired on the board: a key
    -- forgotten early lets a late sighting book the load again.
    load_expires_at  timestamptz,
    settled_at       timestamptz,
    PRIMARY KEY (tenant_id, target_job_key)
);
CREATE INDEX claims_acting_deadline ON claims (act_deadline) WHERE state = 'ACTING';
CREATE INDEX claims_leased_expiry ON claims (lease_expires_at) WHERE state = 'LEASED';
CREATE INDEX claims_recent ON claims (tenant_id, leased_at DESC);

-- Every transition of a claim, written by the trigger below: the one place in
-- the database that says which moves are legal.
CREATE TABLE claim_transitions (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id      uuid NOT NULL,
    target_job_key text NOT NULL,
    from_state     text,
    to_state       text NOT NULL,
    outcome        text,
    token          bigint NOT NULL,
    holder_agent   uuid NOT NULL,
    holder_worker  text NOT NULL,
    at             timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX claim_transitions_key ON claim_transitions (tenant_id, target_job_key, id);

-- The legality check runs BEFORE the row is written; the log is written
-- AFTER, so it records only rows really inserted or updated: a racer whose
-- INSERT … ON CONFLICT lost fires the BEFORE INSERT trigger for a row that is
-- never written, and must leave no trace.
CREATE FUNCTION claim_transition_check() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    legal boolean;
BEGIN
    IF TG_OP = 'INSERT' THEN
        legal := NEW.state = 'LEASED';
    ELSE
        legal := (OLD.state, NEW.state) IN (
            ('LEASED', 'LEASED'),      -- re-lease of an expired lease (new token)
            ('RELEASED', 'LEASED'),    -- re-lease after release
            ('LEASED', 'ACTING'),      -- the fenced start of the action
            ('LEASED', 'RELEASED'),    -- an expired lease swept
            ('ACTING', 'CONFIRMED'),
            ('ACTING', 'TAKEN'),
            ('ACTING', 'RELEASED'),    -- NOT_SENT: provably never left the worker
            ('ACTING', 'UNKNOWN'),
            ('UNKNOWN', 'CONFIRMED'),  -- reconciled: the board has our booking
            ('UNKNOWN', 'RELEASED'))   -- reconciled: a complete look-up found none
            -- an in-place update that is not a transition (same state, same token)
            OR (OLD.state = NEW.state AND OLD.token = NEW.token AND NEW.state <> 'LEASED');
    END IF;
    IF NOT legal THEN
        RAISE EXCEPTION 'claim: illegal transition % -> % for %', CASE WHEN TG_OP = 'INSERT' THEN 'none' ELSE OLD.state END, NEW.state, NEW.target_job_key
            USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.token < OLD.token THEN
        RAISE EXCEPTION 'claim: fencing token went backwards for %', NEW.target_job_key USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER claims_transition BEFORE INSERT OR UPDATE ON claims
    FOR EACH ROW EXECUTE FUNCTION claim_transition_check();

CREATE FUNCTION claim_transition_log() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.state <> NEW.state OR OLD.token <> NEW.token THEN
        INSERT INTO claim_transitions (tenant_id, target_job_key, from_state, to_state, outcome, token, holder_agent, holder_worker)
        VALUES (NEW.tenant_id, NEW.target_job_key, CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END, NEW.state,
                NEW.outcome, NEW.token, NEW.holder_agent, NEW.holder_worker);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER claims_transition_log AFTER INSERT OR UPDATE ON claims
    FOR EACH ROW EXECUTE FUNCTION claim_transition_log();

ALTER TABLE claims ENABLE ROW LEVEL SECURITY;
ALTER TABLE claims FORCE ROW LEVEL SECURITY;
CREATE POLICY claims_tenant ON claims USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
ALTER TABLE claim_transitions ENABLE ROW LEVEL SECURITY;
ALTER TABLE claim_transitions FORCE ROW LEVEL SECURITY;
CREATE POLICY claim_transitions_tenant ON claim_transitions USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
-- The transition log is history: the application may add to it, never rewrite it.
REVOKE UPDATE, DELETE, TRUNCATE ON claim_transitions FROM ${app_role};
