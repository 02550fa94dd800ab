-- A pause switch says since when and by whom it is on, so the console can
-- say "Paused since 20:14 UTC by admin@…" instead of a bare flag.
ALTER TABLE fleet_switches ADD COLUMN paused_at timestamptz, ADD COLUMN paused_by text;
ALTER TABLE tenants ADD COLUMN paused_at timestamptz, ADD COLUMN paused_by text;
UPDATE fleet_switches SET paused_at = updated_at WHERE paused;
