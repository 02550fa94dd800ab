package registry

import "strings"

// DiffLine is one line of a version diff: ' ' kept, '-' removed, '+' added.
type DiffLine struct {
	Op   byte
	Text string
}

// Diff is a line diff of a against b (longest common subsequence, as the
// crawl pages diff job versions; spec files are short).
func Diff(a, b string) []DiffLine {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	n, m := len(x), len(y)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []DiffLine
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case x[i] == y[j]:
			out = append(out, DiffLine{' ', x[i]})
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, DiffLine{'-', x[i]})
			i++
		default:
			out = append(out, DiffLine{'+', y[j]})
			j++
		}
	}
	for ; i < n; i++ {
		out = append(out, DiffLine{'-', x[i]})
	}
	for ; j < m; j++ {
		out = append(out, DiffLine{'+', y[j]})
	}
	return out
}
