-- Operators of the console. Accounts are global (not tenant-owned): a user's
-- reach into tenants is the tenant_grants table (0012), under row-level security.
CREATE TABLE users (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email          text NOT NULL CHECK (email ~ '^[^@\s]+@[^@\s]+$' AND length(email) <= 254),
    role           text NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    password_hash  text NOT NULL,
    -- The confirmed TOTP secret (base32); NULL until enrolment is confirmed
    -- with a valid code, and again after `admin reset-mfa`.
    totp_secret    text,
    -- The highest TOTP time step accepted so far: a code at or below it is a
    -- replay and is refused, whatever its skew.
    totp_last_step bigint NOT NULL DEFAULT 0,
    disabled_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

-- Server-side sessions. The cookie carries 256 random bits; only their
-- SHA-256 is stored, so a copy of this table signs nobody in.
CREATE TABLE sessions (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    token_hash   bytea NOT NULL UNIQUE,
    user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- false while the password is checked but the TOTP step is not done:
    -- such a session reaches nothing but the MFA pages.
    mfa_ok       boolean NOT NULL DEFAULT false,
    -- A TOTP secret offered during enrolment, saved on the user only once a
    -- code generated from it is confirmed.
    enrol_secret text,
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    ended_at     timestamptz,
    ip           text NOT NULL DEFAULT '',
    user_agent   text NOT NULL DEFAULT ''
);
CREATE INDEX sessions_user_idx ON sessions (user_id) WHERE ended_at IS NULL;

-- Failed sign-in attempts, by account, by address and by MFA step: the
-- throttle counts them in a sliding window. Kept in Postgres so every panel
-- replica enforces the same limit.
CREATE TABLE auth_failures (
    key text NOT NULL,
    at  timestamptz NOT NULL
);
CREATE INDEX auth_failures_key_at ON auth_failures (key, at);

-- The user of the current transaction, or NULL: lets a user read their own
-- tenant grants (0012) without opening every tenant.
CREATE FUNCTION app_user() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('app.user_id', true), '')::uuid $$;
