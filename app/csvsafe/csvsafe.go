// Package csvsafe is the one CSV writer of the product. Every CSV it
// writes (the latency report, crawl item exports in the console and on the
// command line) carries text that boards, agents and scraped pages chose,
// and a spreadsheet runs a cell such as =HYPERLINK("http://…") or
// @SUM(…) as a formula when an operator opens the file. As OWASP
// recommends, such a cell gets a leading apostrophe, which spreadsheets
// show as text and do not display.
package csvsafe

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
)

// Cell neutralises one cell: text starting with =, +, -, @, a tab or a
// line break gets a leading apostrophe. A plain number ("-1.5", "+3") is
// left as it is: a spreadsheet reads it as the number it is.
func Cell(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r', '\n':
		if _, err := strconv.ParseFloat(s, 64); err == nil && s[0] != '\t' && s[0] != '\r' && s[0] != '\n' {
			return s
		}
		return "'" + s
	}
	return s
}

// Writer writes CSV records with every cell neutralised.
type Writer struct{ w *csv.Writer }

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: csv.NewWriter(w)} }

// Write writes one record.
func (w *Writer) Write(record []string) error {
	out := make([]string, len(record))
	for i, c := range record {
		out[i] = Cell(c)
	}
	if err := w.w.Write(out); err != nil {
		return fmt.Errorf("csvsafe: %w", err)
	}
	return nil
}

// Flush writes any buffered data and reports a write error.
func (w *Writer) Flush() error {
	w.w.Flush()
	if err := w.w.Error(); err != nil {
		return fmt.Errorf("csvsafe: %w", err)
	}
	return nil
}
