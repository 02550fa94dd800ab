package latency

// csvText neutralises a text cell that a spreadsheet would read as a
// formula: job keys and worker names come from boards and agents, and a
// key such as =HYPERLINK("http://…") would otherwise run when an operator
// opens the CSV. As OWASP recommends, such a cell gets a leading
// apostrophe, which spreadsheets show as text and do not display.
func csvText(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r', '\n':
		return "'" + s
	}
	return s
}
