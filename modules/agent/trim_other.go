//go:build !linux

package agent

// releaseStartupPages does nothing where /proc and madvise are not Linux's.
func releaseStartupPages() (int64, error) { return 0, nil }
