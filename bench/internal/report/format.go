package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// number formats v with thousands separators and the given decimals.
func number(v float64, decimals int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	s := strconv.FormatFloat(math.Abs(v), 'f', decimals, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if frac != "" {
		out += "." + frac
	}
	if v < 0 {
		out = "-" + out
	}
	return out
}

// cell formats a spread as "median (min–max)", or "—" when nothing was
// measured; one run shows only its value.
func cell(s spread, decimals int) string {
	switch s.n {
	case 0:
		return "—"
	case 1:
		return number(s.median, decimals)
	}
	return fmt.Sprintf("%s (%s–%s)", number(s.median, decimals), number(s.min, decimals), number(s.max, decimals))
}

// ratioCell formats a spread of ratios as "0.97× (0.95–1.00)".
func ratioCell(s spread) string {
	switch s.n {
	case 0:
		return "—"
	case 1:
		return fmt.Sprintf("%.2f×", s.median)
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", s.median, s.min, s.max)
}

// scaled divides every value by unit (bytes to MiB, seconds to ms).
func scaled(values []float64, factor float64) []float64 {
	out := make([]float64, len(values))
	for i, v := range values {
		out[i] = v * factor
	}
	return out
}

// markdownTable writes a header row, the separator and the rows.
func markdownTable(b *strings.Builder, header []string, rows [][]string) {
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(header)) + "\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	b.WriteString("\n")
}
