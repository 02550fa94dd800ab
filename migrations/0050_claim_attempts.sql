-- Claim safety past the timing assumptions (issue 11). Every lease of a job
-- is kept as an attempt, so a re-lease no longer erases its predecessor; a
-- booking seen late is applied to the job's claim whatever state it reached
-- (LEASED and RELEASED gain a move to CONFIRMED, with a fresh fencing
-- token); a job released after an UNKNOWN where booking it again is not safe
-- is given up (outcome GIVEN_UP) and never leased again.

ALTER TABLE claims DROP CONSTRAINT claims_outcome_check;
ALTER TABLE claims ADD CONSTRAINT claims_outcome_check
    CHECK (outcome IN ('CONFIRMED','TAKEN','NOT_SENT','UNKNOWN','RELEASED','GIVEN_UP'));

ALTER TABLE claims
    -- A booking of another attempt was applied to this claim: CONFIRMED from
    -- late evidence, or ACTING marked to be settled when its actor reports.
    ADD COLUMN late_evidence  boolean NOT NULL DEFAULT false,
    -- The attempt whose booking the late evidence is.
    ADD COLUMN evidence_token bigint,
    -- The last fresh complete look-up that found no booking of a job
    -- released after an UNKNOWN: the lease statement re-leases such a job
    -- only shortly after one (where the platform honours idempotency keys).
    ADD COLUMN cleared_at     timestamptz;
ALTER TABLE claims_archive
    ADD COLUMN late_evidence  boolean NOT NULL DEFAULT false,
    ADD COLUMN evidence_token bigint,
    ADD COLUMN cleared_at     timestamptz;

-- One row per lease of a job (its fencing token), kept after the claim row
-- moves on or is archived. The claims trigger below opens a row at each
-- lease and copies the attempt's own progress (act times, outcome) while the
-- claim still carries its token; late evidence is written by the engine.
CREATE TABLE claim_attempts (
    tenant_id      uuid NOT NULL REFERENCES tenants(id),
    target_job_key text NOT NULL,
    token          bigint NOT NULL,
    holder_agent   uuid NOT NULL,
    holder_worker  text NOT NULL,
    operation_id   uuid NOT NULL,
    leased_at      timestamptz NOT NULL,
    act_started_at timestamptz,
    act_sent_at    timestamptz,
    outcome        text CHECK (outcome IN ('CONFIRMED','TAKEN','NOT_SENT','UNKNOWN','RELEASED','GIVEN_UP')),
    outcome_detail text,
    outcome_at     timestamptz,
    -- The board's booking this attempt made, when a look-up showed it.
    booking_id     text,
    booked_at      timestamptz,
    -- Its CONFIRMED was applied after the claim had moved on.
    late_evidence  boolean NOT NULL DEFAULT false,
    -- One of two or more bookings of the job for the client (board evidence).
    conflict       boolean NOT NULL DEFAULT false,
    PRIMARY KEY (tenant_id, target_job_key, token)
);
CREATE INDEX claim_attempts_conflict ON claim_attempts (tenant_id, target_job_key) WHERE conflict;
CREATE INDEX claim_attempts_late ON claim_attempts (tenant_id, outcome_at) WHERE late_evidence;

INSERT INTO claim_attempts (tenant_id, target_job_key, token, holder_agent, holder_worker, operation_id, leased_at,
                            act_started_at, act_sent_at, outcome, outcome_detail, outcome_at)
SELECT tenant_id, target_job_key, token, holder_agent, holder_worker, operation_id, leased_at,
       act_started_at, act_sent_at, outcome, outcome_detail, settled_at
FROM claims;

ALTER TABLE claim_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE claim_attempts FORCE ROW LEVEL SECURITY;
CREATE POLICY claim_attempts_tenant ON claim_attempts USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
-- Attempts are kept: the application may add and annotate, never remove.
REVOKE DELETE, TRUNCATE ON claim_attempts FROM ${app_role};

CREATE FUNCTION claim_attempt_sync() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'LEASED' AND (TG_OP = 'INSERT' OR OLD.token <> NEW.token) THEN
        INSERT INTO claim_attempts (tenant_id, target_job_key, token, holder_agent, holder_worker, operation_id, leased_at)
        VALUES (NEW.tenant_id, NEW.target_job_key, NEW.token, NEW.holder_agent, NEW.holder_worker, NEW.operation_id, NEW.leased_at)
        ON CONFLICT DO NOTHING;
    ELSIF TG_OP = 'UPDATE' AND OLD.token = NEW.token
          AND (OLD.state, OLD.outcome, OLD.outcome_detail, OLD.act_started_at, OLD.act_sent_at)
              IS DISTINCT FROM (NEW.state, NEW.outcome, NEW.outcome_detail, NEW.act_started_at, NEW.act_sent_at) THEN
        UPDATE claim_attempts SET act_started_at = NEW.act_started_at, act_sent_at = NEW.act_sent_at,
               outcome = NEW.outcome, outcome_detail = NEW.outcome_detail,
               outcome_at = CASE WHEN NEW.outcome IS DISTINCT FROM OLD.outcome THEN clock_timestamp() ELSE outcome_at END
        WHERE tenant_id = NEW.tenant_id AND target_job_key = NEW.target_job_key AND token = NEW.token;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER claims_attempt_sync AFTER INSERT OR UPDATE ON claims
    FOR EACH ROW EXECUTE FUNCTION claim_attempt_sync();

-- The legal moves (modules/claim/state.go says the same; a test checks
-- every pair). New: LEASED → CONFIRMED and RELEASED → CONFIRMED, late
-- evidence of an earlier attempt's booking, each with a fresh fencing token
-- so a current holder's act statement fails; and a release given up after an
-- UNKNOWN is never leased again, whatever path asks.
CREATE OR REPLACE FUNCTION claim_transition_check() RETURNS trigger
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
            ('LEASED', 'CONFIRMED'),   -- late evidence of an earlier attempt (new token)
            ('ACTING', 'CONFIRMED'),
            ('ACTING', 'TAKEN'),
            ('ACTING', 'RELEASED'),    -- NOT_SENT: provably never left the worker
            ('ACTING', 'UNKNOWN'),
            ('UNKNOWN', 'CONFIRMED'),  -- reconciled: the board has our booking
            ('UNKNOWN', 'RELEASED'),   -- reconciled: a complete look-up found none
            ('RELEASED', 'CONFIRMED')) -- late evidence after a release (new token)
            -- an in-place update that is not a transition (same state, same token)
            OR (OLD.state = NEW.state AND OLD.token = NEW.token AND NEW.state <> 'LEASED');
        IF legal AND OLD.state IN ('LEASED', 'RELEASED') AND NEW.state = 'CONFIRMED' AND NEW.token <= OLD.token THEN
            RAISE EXCEPTION 'claim: % -> CONFIRMED for % needs a fresh fencing token', OLD.state, NEW.target_job_key
                USING ERRCODE = 'check_violation';
        END IF;
        IF OLD.state = 'RELEASED' AND NEW.state = 'LEASED' AND OLD.outcome = 'GIVEN_UP' THEN
            RAISE EXCEPTION 'claim: % was given up after an unknown outcome and is never leased again', NEW.target_job_key
                USING ERRCODE = 'check_violation';
        END IF;
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
