-- Operators' TOTP seeds are sealed with the panel's secret key (app/vault),
-- like platform credentials: users.totp_secret and sessions.enrol_secret
-- now hold "sealed:v1:<base64>" (the panel seals any clear value left from
-- before at its next start, since the key is not in the database). The
-- enrolment copy lives only while its pending session does.
COMMENT ON COLUMN users.totp_secret IS 'TOTP seed sealed with the panel key (sealed:v1:…), NULL until enrolled';
COMMENT ON COLUMN sessions.enrol_secret IS 'TOTP seed offered during enrolment, sealed; cleared when the session ends';

UPDATE sessions SET enrol_secret = NULL WHERE enrol_secret IS NOT NULL AND (ended_at IS NOT NULL OR mfa_ok);

CREATE FUNCTION sessions_clear_enrolment() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.ended_at IS NOT NULL OR NEW.mfa_ok THEN
        NEW.enrol_secret := NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER sessions_clear_enrolment BEFORE INSERT OR UPDATE ON sessions
    FOR EACH ROW EXECUTE FUNCTION sessions_clear_enrolment();
