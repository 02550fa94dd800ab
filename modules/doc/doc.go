// Package doc holds the tests that keep the user docs (README.md and
// docs/*.md) true to the tree: every repository path they cite exists, and
// README's module map names every module. It has no code of its own.
package doc
