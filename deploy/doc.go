// Package deploy holds Fleetwright's deployment files — the systemd units and
// their example environment files under systemd/, the Caddyfile — and the
// tests that check them (and the repository's Dockerfile) by reading them and
// by running systemd-analyze verify. It has no code of its own: the files are
// installed by hand as docs/DEPLOY.md describes.
package deploy
