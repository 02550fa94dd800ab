-- Throttling of guesses (passwords and TOTP codes) replaces the failure log
-- of 0010. One row per key: 'acct:<email>' and 'mfa:<user id>' follow the
-- account rule (5 free attempts, then a delay doubling from 1 s to 15 min,
-- until a success), 'addr:<address>' the address rule (20 per minute).
-- An attempt is recorded before it is evaluated, by the one statement that
-- decides whether it may be: concurrent attempts on a key queue on its row,
-- so two requests or two replicas can never both see "four so far".
DROP TABLE auth_failures;

CREATE TABLE auth_throttle (
    key        text PRIMARY KEY,
    -- Attempts admitted: since the last success (account rule) or in the
    -- current window (address rule).
    attempts   integer NOT NULL,
    -- Start of the address rule's one-minute window.
    window_at  timestamptz NOT NULL,
    -- No attempt is admitted before this (account rule).
    next_at    timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE INDEX auth_throttle_updated ON auth_throttle (updated_at);
