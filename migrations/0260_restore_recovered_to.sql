-- A point-in-time recovery (fleetwright restore --wal-archive) replays the
-- archived WAL past the backup: the database then holds everything
-- committed until recovered_to, and only what came after is lost. NULL: a
-- restore of the backup alone, which holds what was committed before
-- backup_started_at. Readers take COALESCE(recovered_to, backup_started_at)
-- as the start of the lost history (nullable, so a previous release keeps
-- inserting restores rows without it).
ALTER TABLE restores ADD COLUMN recovered_to timestamptz;
ALTER TABLE restores ADD CONSTRAINT restores_recovered_after_backup
    CHECK (recovered_to IS NULL OR recovered_to >= backup_started_at);
