-- Dispatch mode per tenant (docs/CLAIMS.md, "Dispatch modes"): 'race' offers
-- each queued job to every warm actor and the first lease request wins;
-- 'assign' has the dispatcher choose one warm actor and grant it the job in
-- the transaction that records the job. Postgres decides in both. Set by an
-- admin, audited (claim.dispatch_mode).
ALTER TABLE tenants ADD COLUMN dispatch_mode text NOT NULL DEFAULT 'race'
    CHECK (dispatch_mode IN ('race', 'assign'));
