package crawl

import (
	"fmt"
	"io"
	"time"

	"github.com/fleetwright/fleetwright/app/csvsafe"
)

// ItemsCSV writes items as CSV, the same for the console's download and
// `fleetwright crawl items --format csv`: key, first_seen, last_seen,
// changed_at, then the job's fields in their order. Scraped text a
// spreadsheet would run as a formula is written as text (app/csvsafe).
type ItemsCSV struct {
	w    *csvsafe.Writer
	cols []string
}

// NewItemsCSV writes the header row for a job's fields cols.
func NewItemsCSV(w io.Writer, cols []string) (*ItemsCSV, error) {
	c := &ItemsCSV{w: csvsafe.NewWriter(w), cols: cols}
	if err := c.w.Write(append([]string{"key", "first_seen", "last_seen", "changed_at"}, cols...)); err != nil {
		return nil, fmt.Errorf("crawl: items csv: %w", err)
	}
	return c, nil
}

// Write writes one item.
func (c *ItemsCSV) Write(it Item) error {
	row := []string{it.Key, it.FirstSeen.UTC().Format(time.RFC3339), it.LastSeen.UTC().Format(time.RFC3339), it.ChangedAt.UTC().Format(time.RFC3339)}
	for _, col := range c.cols {
		row = append(row, Cell(it.Data[col]))
	}
	if err := c.w.Write(row); err != nil {
		return fmt.Errorf("crawl: items csv: %w", err)
	}
	return nil
}

// Flush writes what is buffered.
func (c *ItemsCSV) Flush() error {
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("crawl: items csv: %w", err)
	}
	return nil
}
