-- A database restored from a backup says so (fleetwright restore writes one
-- row, as the owner, before any panel starts on it): everything after the
-- backup's start is missing from it, so the claim engine treats the loads
-- of that time as in doubt (docs/CLAIMS.md, "A restore never books twice")
-- and audit verify reports the entries the anchors prove existed.
CREATE TABLE restores (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    backup_id          text NOT NULL,
    -- The backup holds everything committed before backup_started_at, and
    -- possibly some of what was committed until backup_finished_at.
    backup_started_at  timestamptz NOT NULL,
    backup_finished_at timestamptz NOT NULL,
    backup_release     text NOT NULL DEFAULT '',
    restored_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    restored_by        text NOT NULL DEFAULT '',
    release            text NOT NULL DEFAULT '',
    -- claim_token's last value in the backup, and the first token issued
    -- after the restore: a token between them was issued by the lost
    -- history (an agent's outbox may still hold its outcome).
    tokens_before      bigint NOT NULL,
    tokens_from        bigint NOT NULL,
    CHECK (backup_finished_at >= backup_started_at AND tokens_from > tokens_before)
);
GRANT SELECT ON restores TO ${app_role};

CREATE FUNCTION restores_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'restores is append-only' USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER restores_no_update BEFORE UPDATE OR DELETE ON restores
    FOR EACH ROW EXECUTE FUNCTION restores_append_only();
