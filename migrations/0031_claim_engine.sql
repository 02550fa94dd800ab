-- The claim engine around the claims table: cells and tenant routing, the
-- tenant's filters and the panel's record of each queued job (the facts the
-- filters are checked against again when a lease is granted), daily caps and
-- review, board evidence of duplicates and the archive. Claim changes are
-- audited in the console's hash-chained audit_log (0011), not here.

-- Cells: a Redis, its watchers and its worker pool. An empty redis_url means
-- the panel's own Redis (FLEET_REDIS_URL, or the embedded one).
CREATE TABLE cells (
    name       text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    redis_url  text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO cells (name) VALUES ('default');

-- Tenant routing, caps and review live on the tenant (admin data, not under
-- row-level security, like the pause switch).
ALTER TABLE tenants
    ADD COLUMN cell text NOT NULL DEFAULT 'default' REFERENCES cells(name) ON UPDATE CASCADE,
    -- At most this many claims a UTC day may become bookings (LEASED, ACTING,
    -- UNKNOWN or CONFIRMED); NULL: no cap.
    ADD COLUMN daily_booking_cap integer CHECK (daily_booking_cap >= 0),
    -- A job offering more than this (cents) waits for an operator's approval
    -- before it can be leased; NULL: no review.
    ADD COLUMN review_above_cents bigint CHECK (review_above_cents >= 0);

ALTER TABLE claims ADD COLUMN cell text;
CREATE INDEX claims_settled ON claims (load_expires_at) WHERE state IN ('CONFIRMED', 'TAKEN', 'RELEASED');
CREATE INDEX claims_holder ON claims (tenant_id, holder_agent) WHERE state IN ('LEASED', 'ACTING');

-- The tenant's filters. A job is wanted when at least one enabled filter
-- matches it; a tenant without filters wants nothing. Lists are stored
-- lowercased; an empty list matches anything.
CREATE TABLE claim_filters (
    id                      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id               uuid NOT NULL REFERENCES tenants(id),
    name                    text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    enabled                 boolean NOT NULL DEFAULT true,
    origins                 text[] NOT NULL DEFAULT '{}',
    destinations            text[] NOT NULL DEFAULT '{}',
    equipment               text[] NOT NULL DEFAULT '{}',
    min_rate_per_mile_cents integer NOT NULL DEFAULT 0 CHECK (min_rate_per_mile_cents >= 0),
    max_weight_lbs          integer CHECK (max_weight_lbs >= 0),
    min_miles               integer CHECK (min_miles >= 0),
    max_miles               integer CHECK (max_miles >= 0),
    updated_at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX claim_filters_tenant ON claim_filters (tenant_id);

-- The panel's record of a queued job: written once, by the cell dispatcher,
-- from the first sighting that passed the filters. The lease statement checks
-- the filters again against this row, never against anything an actor sends.
CREATE TABLE claim_jobs (
    tenant_id      uuid NOT NULL REFERENCES tenants(id),
    job_key        text NOT NULL CHECK (length(job_key) BETWEEN 1 AND 200),
    cell           text NOT NULL,
    origin         text NOT NULL DEFAULT '',
    destination    text NOT NULL DEFAULT '',
    equipment      text NOT NULL DEFAULT '',
    weight_lbs     integer NOT NULL DEFAULT 0,
    miles          integer NOT NULL DEFAULT 0,
    rate_cents     bigint NOT NULL DEFAULT 0,
    published_at   timestamptz,
    expires_at     timestamptz,
    seen_at        timestamptz NOT NULL,
    queued_at      timestamptz NOT NULL,
    clock_error_ms integer NOT NULL DEFAULT 0,
    seen_by_agent  uuid,
    seen_by_worker text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, job_key)
);
CREATE INDEX claim_jobs_expiry ON claim_jobs (expires_at);
CREATE INDEX claim_jobs_queued ON claim_jobs (tenant_id, queued_at);

-- claim_region('Dallas, TX') = 'tx': the part after the last comma.
CREATE FUNCTION claim_region(s text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT lower(btrim(regexp_replace(coalesce(s, ''), '^.*,', ''))) $$;

-- One filter against one job. modules/claim/filter.go (Filter.Match) is the
-- same rule in Go; a test checks that the two agree.
CREATE FUNCTION claim_filter_matches(f claim_filters, j claim_jobs) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT f.enabled
        AND (cardinality(f.origins) = 0 OR lower(btrim(j.origin)) = ANY (f.origins) OR claim_region(j.origin) = ANY (f.origins))
        AND (cardinality(f.destinations) = 0 OR lower(btrim(j.destination)) = ANY (f.destinations) OR claim_region(j.destination) = ANY (f.destinations))
        AND (cardinality(f.equipment) = 0 OR lower(btrim(j.equipment)) = ANY (f.equipment))
        AND (f.min_rate_per_mile_cents = 0 OR (j.miles > 0 AND j.rate_cents >= f.min_rate_per_mile_cents::bigint * j.miles))
        AND (f.max_weight_lbs IS NULL OR j.weight_lbs <= f.max_weight_lbs)
        AND (f.min_miles IS NULL OR j.miles >= f.min_miles)
        AND (f.max_miles IS NULL OR j.miles <= f.max_miles) $$;

-- Review mode: a lease above the tenant's threshold waits for an operator.
CREATE TABLE claim_reviews (
    tenant_id    uuid NOT NULL REFERENCES tenants(id),
    job_key      text NOT NULL,
    rate_cents   bigint NOT NULL,
    state        text NOT NULL DEFAULT 'PENDING' CHECK (state IN ('PENDING', 'APPROVED', 'REJECTED')),
    requested_at timestamptz NOT NULL DEFAULT now(),
    decided_at   timestamptz,
    decided_by   text,
    PRIMARY KEY (tenant_id, job_key)
);

-- Duplicate confirmations as the board shows them (the reconciler's and the
-- periodic sweep's look-ups of the client's bookings), never from our rows.
CREATE TABLE claim_duplicates (
    tenant_id uuid NOT NULL REFERENCES tenants(id),
    job_key   text NOT NULL,
    bookings  integer NOT NULL CHECK (bookings >= 2),
    evidence  jsonb NOT NULL,
    found_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, job_key)
);

-- Settled claims whose load has expired on the board.
CREATE TABLE claims_archive (LIKE claims INCLUDING DEFAULTS);
ALTER TABLE claims_archive ADD COLUMN archived_at timestamptz NOT NULL DEFAULT now(),
    ADD PRIMARY KEY (tenant_id, target_job_key, token);

ALTER TABLE claim_filters ENABLE ROW LEVEL SECURITY;
ALTER TABLE claim_filters FORCE ROW LEVEL SECURITY;
CREATE POLICY claim_filters_tenant ON claim_filters USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
ALTER TABLE claim_jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE claim_jobs FORCE ROW LEVEL SECURITY;
CREATE POLICY claim_jobs_tenant ON claim_jobs USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
ALTER TABLE claim_reviews ENABLE ROW LEVEL SECURITY;
ALTER TABLE claim_reviews FORCE ROW LEVEL SECURITY;
CREATE POLICY claim_reviews_tenant ON claim_reviews USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
ALTER TABLE claim_duplicates ENABLE ROW LEVEL SECURITY;
ALTER TABLE claim_duplicates FORCE ROW LEVEL SECURITY;
CREATE POLICY claim_duplicates_tenant ON claim_duplicates USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
ALTER TABLE claims_archive ENABLE ROW LEVEL SECURITY;
ALTER TABLE claims_archive FORCE ROW LEVEL SECURITY;
CREATE POLICY claims_archive_tenant ON claims_archive USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant());
