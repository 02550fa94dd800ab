-- Limits for enrolled assistants (issue 14, item 8): the installation's on
-- the one row of fleet_switches, each tenant's on its row. JSON objects of
-- the wire's AssistantLimitSet (task_steps, task_tokens, task_cost_usd,
-- task_wall_seconds, task_tabs, day_steps, day_tokens, day_cost_usd); an
-- absent or zero field is no limit from that source. The panel sends both
-- in welcome and configure; the assistant applies, per limit, the lowest of
-- its task's, its person's, the tenant's and the global one.
ALTER TABLE fleet_switches ADD COLUMN assistant_limits jsonb NOT NULL DEFAULT '{}'
    CHECK (jsonb_typeof(assistant_limits) = 'object');
ALTER TABLE tenants ADD COLUMN assistant_limits jsonb NOT NULL DEFAULT '{}'
    CHECK (jsonb_typeof(assistant_limits) = 'object');
