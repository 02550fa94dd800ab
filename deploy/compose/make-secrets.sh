#!/bin/sh
# Writes the compose deployment's secrets into DIR (default deploy/secrets):
# random passwords, the panel's sealing key, a pgpass file for the panel, a
# redis.conf with the password and a memory cap, and the private CA whose
# root Caddy signs with and the agents trust. Each file is mode 0600 and,
# when run as root, owned by the user of the container that reads it
# (10001 Fleetwright, 999 Postgres and Redis); the CA certificate is public.
# Existing files are kept, so running it again changes nothing. The agents'
# tokens are not made here: the panel prints each once
# (fleetwright admin issue-agent-token), and they go in DIR/agent-N.token.
set -eu
dir=${1:-$(dirname "$0")/../secrets}
domain=${FLEET_DOMAIN:-panel.fleet.internal}
umask 077
mkdir -p "$dir"
cd "$dir"

rand() { openssl rand -hex 32; }
keep() { [ -s "$1" ]; }

for f in pg_super_password pg_owner_password pg_app_password redis_password; do
	keep "$f" || rand > "$f"
done
keep panel_secret_key || rand > panel_secret_key
if ! keep pgpass; then
	printf 'postgres:5432:fleetwright:fleet_owner:%s\npostgres:5432:fleetwright:fleet_app:%s\n' \
		"$(cat pg_owner_password)" "$(cat pg_app_password)" > pgpass
fi
if ! keep redis.conf; then
	# noeviction: a full Redis refuses writes loudly; evicting the cells'
	# dedup keys would let a sighting through twice.
	printf 'requirepass %s\nmaxmemory 192mb\nmaxmemory-policy noeviction\nappendonly yes\n' "$(cat redis_password)" > redis.conf
fi
if ! keep caddy_root_ca.key; then
	openssl ecparam -name prime256v1 -genkey -noout -out caddy_root_ca.key
	openssl req -x509 -new -key caddy_root_ca.key -sha256 -days 3650 \
		-subj "/CN=Fleetwright compose root CA ($domain)" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
		-out caddy_root_ca.crt
fi
chmod 600 ./*
chmod 644 caddy_root_ca.crt
for n in 1 2; do
	[ -e "agent-$n.token" ] || : > "agent-$n.token"
done
if [ "$(id -u)" = 0 ]; then
	chown 10001:10001 panel_secret_key pgpass redis_password agent-*.token
	chown 999:999 pg_super_password pg_owner_password pg_app_password redis.conf
else
	echo "not root: run  sudo chown 10001:10001 $dir/panel_secret_key $dir/pgpass $dir/redis_password $dir/agent-*.token" >&2
	echo "          and  sudo chown 999:999 $dir/pg_*_password $dir/redis.conf  (the containers' users must read them)" >&2
fi
echo "secrets in $dir"
