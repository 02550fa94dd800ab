-- The platform's clock, as a watcher measured it against its agent's when it
-- saw the job: published_at and expires_at are then on the panel's clock, and
-- this is the error bound of the publish → detect span in milliseconds (the
-- agent's own offset cancels out of it). NULL: the platform's answers carried
-- no time the watcher could read, and published_at is the platform's own.
ALTER TABLE claim_jobs ADD COLUMN board_clock_error_ms integer;
ALTER TABLE claims ADD COLUMN board_clock_error_ms integer;
ALTER TABLE claims_archive ADD COLUMN board_clock_error_ms integer;
