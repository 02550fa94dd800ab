package main

import (
	"errors"

	"github.com/jackc/pgx/v5"
)

// userOf returns the role name in a Postgres URL without echoing the URL.
func userOf(url string) (string, error) {
	c, err := pgx.ParseConfig(url)
	if err != nil {
		return "", errors.New("malformed database URL (check FLEET_DATABASE_APP_URL)")
	}
	return c.User, nil
}
