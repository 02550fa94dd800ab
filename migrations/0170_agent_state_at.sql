-- When an agent's last state report arrived. last_seen moves with every
-- sign of life (connections, clock offsets, assistant reports); a hung
-- worker's age is its report's oldest-task age plus the time since that
-- report, so it is measured from the report itself: from last_seen, a live
-- connection made a hung worker look younger than it was and its alarm
-- flapped (seen in the load test's board outage).
ALTER TABLE agents ADD COLUMN state_at timestamptz;
UPDATE agents SET state_at = last_seen WHERE state IS NOT NULL;
