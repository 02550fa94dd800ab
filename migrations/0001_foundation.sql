-- The application role gets data privileges on what the owner creates, and
-- nothing else: no DDL, no ownership (row-level security depends on that).
-- Tables that must stay append-only revoke UPDATE/DELETE in their own migration.
ALTER DEFAULT PRIVILEGES GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ${app_role};
ALTER DEFAULT PRIVILEGES GRANT USAGE, SELECT ON SEQUENCES TO ${app_role};
ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO ${app_role};

-- One row: who this installation is. Agents remember the id of the panel that
-- last welcomed them, so a panel started on an empty database by mistake is
-- recognised as a stranger and cannot make the fleet retire itself.
CREATE TABLE installation (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    id         uuid NOT NULL DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO installation DEFAULT VALUES;

-- Every panel replica announces itself here; the console lists the live ones
-- and a leader-elected job removes those gone for good.
CREATE TABLE panel_replicas (
    id         uuid PRIMARY KEY,
    host       text NOT NULL,
    listen     text NOT NULL,
    version    text NOT NULL,
    pid        integer NOT NULL,
    started_at timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL
);
