-- A password someone else chose (`admin create-user`, an admin on the Users
-- page, an admin's reset) is one-time: its user must choose their own at
-- the first sign-in before reaching anything else.
ALTER TABLE users ADD COLUMN must_change_password boolean NOT NULL DEFAULT false;
