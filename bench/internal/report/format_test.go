package report

import "testing"

func TestNumbersAndCellsReadAsTheDocsShowThem(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{number(1234567.891, 0), "1,234,568"},
		{number(-1234.5, 1), "-1,234.5"},
		{number(999, 0), "999"},
		{cell(spreadOf([]float64{3, 1, 2}), 0), "2 (1–3)"},
		{cell(spreadOf([]float64{5}), 1), "5.0"},
		{cell(spreadOf(nil), 0), "—"},
		{ratioCell(spreadOf([]float64{0.9, 1, 0.95})), "0.95× (0.90–1.00)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
