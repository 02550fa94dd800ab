-- The agent's installation key (protocol v4): the public half of an X25519
-- key the agent generated and keeps in its state dir. Pinned at the agent's
-- first welcome; the account's credentials are sealed to it and to nothing
-- else, so a new token alone (an operator dialling the gateway with it) does
-- not yield them. Only an admin's "new installation" (console, with a second
-- confirmation, or `admin issue-token --new-installation`) clears it, and the
-- next hello pins the new key.
ALTER TABLE agents
    ADD COLUMN install_key text CHECK (install_key ~ '^[A-Za-z0-9_-]{43}$'),
    ADD COLUMN install_key_pinned_at timestamptz;
