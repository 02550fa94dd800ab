-- One source of truth for an enrolled assistant's spend per day (issue 14):
-- the model_spend_day limit of modules/limit (its tenant and global rows in
-- limits, in micro-USD), which the panel sends to its assistants as the
-- day_cost_usd of their limits. The assistant limits' own day_cost_usd
-- (0091) moves there. Where both were set, the lower is kept: the lowest
-- limit applied before, so the one that applied still does. The JSON loses
-- the key. A model_spend_day of 0 (no spend at all, refused from now on)
-- becomes the smallest amount, one micro-dollar.
--
-- limits is under FORCEd row-level security and the migrating role does
-- not bypass it: each row is written in its tenant's scope.
DO $$
DECLARE
    t record;
    v bigint;
BEGIN
    FOR t IN SELECT id, assistant_limits->>'day_cost_usd' AS usd FROM tenants
             WHERE jsonb_typeof(assistant_limits->'day_cost_usd') = 'number'
               AND (assistant_limits->>'day_cost_usd')::numeric > 0 LOOP
        v := GREATEST(1, round(t.usd::numeric * 1000000))::bigint;
        PERFORM set_config('app.tenant_id', t.id::text, true);
        INSERT INTO limits (tenant_id, name, value, updated_by)
        VALUES (t.id, 'model_spend_day', v, 'migration 0130 (assistant spend per day)')
        ON CONFLICT (tenant_id, name) DO UPDATE
            SET value = LEAST(limits.value, EXCLUDED.value), updated_at = now(), updated_by = EXCLUDED.updated_by;
    END LOOP;
    SELECT GREATEST(1, round((assistant_limits->>'day_cost_usd')::numeric * 1000000))::bigint INTO v
    FROM fleet_switches
    WHERE jsonb_typeof(assistant_limits->'day_cost_usd') = 'number'
      AND (assistant_limits->>'day_cost_usd')::numeric > 0;
    IF v IS NOT NULL THEN
        PERFORM set_config('app.tenant_id', '00000000-0000-0000-0000-000000000000', true);
        INSERT INTO limits (tenant_id, name, value, updated_by)
        VALUES ('00000000-0000-0000-0000-000000000000', 'model_spend_day', v, 'migration 0130 (assistant spend per day)')
        ON CONFLICT (tenant_id, name) DO UPDATE
            SET value = LEAST(limits.value, EXCLUDED.value), updated_at = now(), updated_by = EXCLUDED.updated_by;
    END IF;
    PERFORM set_config('app.tenant_id', '', true);
END $$;

-- Stored zeros: read in each tenant's scope (the global row is readable
-- from any scope, writable only from its own).
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT id FROM tenants UNION ALL SELECT '00000000-0000-0000-0000-000000000000'::uuid LOOP
        PERFORM set_config('app.tenant_id', t.id::text, true);
        UPDATE limits SET value = 1, updated_at = now(), updated_by = 'migration 0130 (0 allowed no spend)'
        WHERE tenant_id = t.id AND name = 'model_spend_day' AND value = 0;
    END LOOP;
    PERFORM set_config('app.tenant_id', '', true);
END $$;

UPDATE tenants SET assistant_limits = assistant_limits - 'day_cost_usd' WHERE assistant_limits ? 'day_cost_usd';
UPDATE fleet_switches SET assistant_limits = assistant_limits - 'day_cost_usd' WHERE assistant_limits ? 'day_cost_usd';
