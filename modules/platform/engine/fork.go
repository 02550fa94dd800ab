package engine

import (
	"net/http"
	"sync"
	"time"
)

// Fork returns an adapter that shares a's compiled spec (immutable once
// built) with its own idempotency cache, dial and request budget hook: one
// compile serves every worker of an account, each with its own guard.
func (a *Adapter) Fork() *Adapter {
	c := *a
	c.kmu = &sync.Mutex{}
	c.keys, c.keysAt, c.admit = false, time.Time{}, nil
	c.keysHTTP = &http.Client{Timeout: 5 * time.Second}
	return &c
}
