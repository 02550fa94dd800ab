-- Schedules: recurring work (crawl runs, assistant tasks, maintenance) of a
-- tenant, or of the system on the all-zero tenant. The scheduler decides
-- from this stored state, never from the assumption that every tick fired:
-- last_tick_at is the last fire time already handled (run or skipped), and
-- everything after it up to now is due, read with the schedule's catch-up
-- policy. The lease (owner and expiry) keeps two runs of one schedule from
-- overlapping, across panel replicas too.
CREATE TABLE schedules (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id        uuid NOT NULL DEFAULT app_tenant(),
    name             text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,99}$'),
    -- The registered kind whose handler runs it (crawl.run, audit.verify…).
    kind             text NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_.]*$'),
    cron             text NOT NULL CHECK (length(cron) BETWEEN 1 AND 200),
    time_zone        text NOT NULL,
    catch_up         text NOT NULL CHECK (catch_up IN ('skip', 'one', 'all')),
    -- With catch_up 'all': at most this many missed runs (the most recent).
    catch_up_cap     integer NOT NULL DEFAULT 10 CHECK (catch_up_cap BETWEEN 1 AND 1000),
    args             jsonb NOT NULL DEFAULT '{}',
    enabled          boolean NOT NULL DEFAULT false,
    last_tick_at     timestamptz,
    next_run_at      timestamptz,
    lease_owner      text,
    lease_expires_at timestamptz,
    created_by       text NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE enabled;

-- One row per fire time handled: pending (to run), running, ok, failed,
-- skipped (by the catch-up policy) or lost (its owner's lease expired
-- mid-run, so it is not known whether it finished). covers counts the fire
-- times one row stands for (catch-up 'one' runs once for many).
CREATE TABLE schedule_runs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     uuid NOT NULL DEFAULT app_tenant(),
    schedule_id   uuid NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    scheduled_for timestamptz NOT NULL,
    covers        integer NOT NULL DEFAULT 1 CHECK (covers >= 1),
    status        text NOT NULL CHECK (status IN ('pending', 'running', 'ok', 'failed', 'skipped', 'lost')),
    owner         text,
    started_at    timestamptz,
    finished_at   timestamptz,
    error         text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (schedule_id, scheduled_for)
);
CREATE INDEX schedule_runs_pending ON schedule_runs (schedule_id, scheduled_for) WHERE status = 'pending';
CREATE INDEX schedule_runs_recent ON schedule_runs (schedule_id, id DESC);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['schedules', 'schedule_runs'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY %I ON %I USING (tenant_id = app_tenant() OR (SELECT app_cross_tenant())) WITH CHECK (tenant_id = app_tenant())', t || '_tenant', t);
    END LOOP;
END $$;
