-- Platform accounts, their agents, the commands the panel sends them and the
-- events they report. Everything here belongs to a tenant and lives under
-- FORCEd row-level security.

CREATE TABLE accounts (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   uuid NOT NULL REFERENCES tenants(id),
    -- The account's identity on the platform; the agent's traits derive from it.
    account_key text NOT NULL CHECK (length(account_key) BETWEEN 1 AND 200),
    region      text NOT NULL DEFAULT 'us-east',
    board_url   text NOT NULL,
    username    text NOT NULL,
    -- Password and TOTP secret, sealed with the panel's secret key (app/vault),
    -- bound to the account id: never shown again after entry.
    secret_box  bytea NOT NULL,
    -- Worker specs the agent runs ([{name, kind, settings}]).
    workers     jsonb NOT NULL DEFAULT '[]',
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, account_key),
    UNIQUE (tenant_id, id)
);

CREATE TABLE agents (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    uuid NOT NULL REFERENCES tenants(id),
    account_id   uuid NOT NULL,
    name         text NOT NULL,
    -- SHA-256 of the token (256 random bits). Not argon2id: thousands of
    -- agents reconnect at once after a panel restart.
    token_hash   bytea NOT NULL UNIQUE,
    token_hint   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- A deleted agent is a tombstone: its token is answered "retired".
    retired_at   timestamptz,
    paused       boolean NOT NULL DEFAULT false,
    -- Live view, written by the replica the agent is connected to.
    connected    boolean NOT NULL DEFAULT false,
    replica_id   uuid,
    remote_addr  text,
    host         text,
    build        text,
    protocol     integer,
    connected_at timestamptz,
    last_seen    timestamptz,
    clock_offset_ms double precision,
    clock_error_ms  double precision,
    rtt_ms          double precision,
    state        jsonb,
    FOREIGN KEY (tenant_id, account_id) REFERENCES accounts (tenant_id, id)
);
CREATE INDEX agents_tenant ON agents (tenant_id);

-- Commands are persisted until the agent acknowledges them: a dropped
-- connection or a lost notification delays a command, never loses it.
CREATE TABLE agent_commands (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  uuid NOT NULL REFERENCES tenants(id),
    agent_id   uuid NOT NULL REFERENCES agents(id),
    kind       text NOT NULL,
    body       jsonb NOT NULL DEFAULT '{}',
    created_by text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz,
    acked_at   timestamptz,
    ok         boolean,
    error      text
);
CREATE INDEX agent_commands_pending ON agent_commands (agent_id, created_at) WHERE acked_at IS NULL;

CREATE TABLE agent_events (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id uuid NOT NULL REFERENCES tenants(id),
    agent_id  uuid NOT NULL REFERENCES agents(id),
    at        timestamptz NOT NULL,
    level     text NOT NULL,
    kind      text NOT NULL,
    worker    text NOT NULL DEFAULT '',
    message   text NOT NULL,
    fields    jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX agent_events_agent ON agent_events (tenant_id, agent_id, id DESC);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['accounts', 'agents', 'agent_commands', 'agent_events'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY %I ON %I USING (tenant_id = app_tenant()) WITH CHECK (tenant_id = app_tenant())', t || '_tenant', t);
    END LOOP;
END $$;
