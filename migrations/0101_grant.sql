-- Assignment dispatch (docs/CLAIMS.md, "Dispatch modes"): in a tenant's
-- assign mode the dispatcher grants a job to one chosen actor in the commit
-- that records the job, and the claim is written ACTING at once — one
-- durable commit between a sighting and the booking request. For such a
-- grant lease_expires_at is the send-by time (the gate refuses after it, by
-- the database clock) and act_deadline the send-by plus the hard action
-- timeout (past it the sweeper makes the claim UNKNOWN, as for any action).
--
-- New moves: a row may start ACTING (a grant; it must carry its start and
-- deadline), and RELEASED → ACTING (a re-grant, with a fresh fencing token;
-- never from a release given up after an UNKNOWN). An expired LEASED may be
-- re-granted too (LEASED → ACTING, already legal; the re-grant takes a new
-- token). modules/claim/state.go says the same; TestTransitionsMatchTrigger
-- checks every pair.
CREATE OR REPLACE FUNCTION claim_transition_check() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    legal boolean;
BEGIN
    IF TG_OP = 'INSERT' THEN
        legal := NEW.state = 'LEASED'
            OR (NEW.state = 'ACTING' AND NEW.act_started_at IS NOT NULL AND NEW.act_deadline IS NOT NULL);
    ELSE
        legal := (OLD.state, NEW.state) IN (
            ('LEASED', 'LEASED'),      -- re-lease of an expired lease (new token)
            ('RELEASED', 'LEASED'),    -- re-lease after release
            ('LEASED', 'ACTING'),      -- the fenced start of the action (or a re-grant of an expired lease, new token)
            ('RELEASED', 'ACTING'),    -- a re-grant after release (new token)
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
        IF legal AND OLD.state = 'RELEASED' AND NEW.state = 'ACTING' AND NEW.token <= OLD.token THEN
            RAISE EXCEPTION 'claim: a re-grant of % needs a fresh fencing token', NEW.target_job_key
                USING ERRCODE = 'check_violation';
        END IF;
        IF OLD.state = 'RELEASED' AND NEW.state IN ('LEASED', 'ACTING') AND OLD.outcome = 'GIVEN_UP' THEN
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

-- A grant opens its attempt as a lease does (with the action's start).
CREATE OR REPLACE FUNCTION claim_attempt_sync() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('LEASED', 'ACTING') AND (TG_OP = 'INSERT' OR OLD.token <> NEW.token) THEN
        INSERT INTO claim_attempts (tenant_id, target_job_key, token, holder_agent, holder_worker, operation_id, leased_at,
                                    act_started_at)
        VALUES (NEW.tenant_id, NEW.target_job_key, NEW.token, NEW.holder_agent, NEW.holder_worker, NEW.operation_id,
                NEW.leased_at, NEW.act_started_at)
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
