#!/bin/sh
# Creates Fleetwright's two roles in the compose Postgres at its first start
# (docker-entrypoint-initdb.d): the owner, which runs migrations and owns the
# schema, and the application role the panel serves with — neither a
# superuser nor BYPASSRLS, so row-level security holds for everything the
# panel does. Passwords come from the compose secrets, never the environment.
set -eu
owner_pw=$(cat /run/secrets/pg_owner_password)
app_pw=$(cat /run/secrets/pg_app_password)
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-fleetwright}" \
	-v owner_pw="$owner_pw" -v app_pw="$app_pw" -v db="${POSTGRES_DB:-fleetwright}" <<'SQL'
CREATE ROLE fleet_owner LOGIN NOSUPERUSER NOCREATEROLE NOBYPASSRLS PASSWORD :'owner_pw';
CREATE ROLE fleet_app LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS NOINHERIT PASSWORD :'app_pw';
-- As the embedded cluster does (app/embedded PrepareDatabase): the schema
-- is the owner's, the application role may use it, and nothing more; table
-- privileges come from the migrations.
ALTER DATABASE :"db" OWNER TO fleet_owner;
ALTER SCHEMA public OWNER TO fleet_owner;
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"db" TO fleet_app;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO fleet_app;
SQL
