-- Durability on a replicated cluster. A claim is acknowledged only once it is
-- on two nodes; while the cluster cannot promise that (no synchronous
-- standby), the panel sets durability_hold (why, and since when) and every
-- statement that grants a lease or starts an action reads it, as it reads
-- the pause switch. NULL: not held. The embedded single node never sets it.
ALTER TABLE fleet_switches ADD COLUMN durability_hold text,
                           ADD COLUMN durability_hold_since timestamptz;

-- A tenant that knowingly accepts single-node durability keeps claiming
-- while the hold is on (its commits are then on the primary alone).
ALTER TABLE tenants ADD COLUMN single_node_ok boolean NOT NULL DEFAULT false;

-- What the primary promises, for the panel's durability check. It reads
-- pg_stat_replication with the owner's rights (the owner needs
-- pg_read_all_stats; the application role is NOINHERIT, so a role granted
-- to it would give it nothing). synchronous_commit is the caller's own.
CREATE FUNCTION fleet_replication(OUT sync_standbys int, OUT standbys int, OUT sync_names text,
                                  OUT sync_commit text, OUT can_see boolean, OUT in_recovery boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$
  SELECT (SELECT count(*)::int FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum') AND state = 'streaming'),
         (SELECT count(*)::int FROM pg_stat_replication),
         current_setting('synchronous_standby_names'),
         current_setting('synchronous_commit'),
         pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
         pg_is_in_recovery()
$$;
REVOKE ALL ON FUNCTION fleet_replication() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fleet_replication() TO ${app_role};
