-- The ids of the secret keys each panel replica holds (app/vault), its
-- sealing key first, written at every heartbeat: a key rotation
-- (`fleetwright admin rotate-key`) re-seals nothing until every live
-- replica holds the new key. NULL from a release that does not report them.
ALTER TABLE panel_replicas ADD COLUMN key_ids text[];
