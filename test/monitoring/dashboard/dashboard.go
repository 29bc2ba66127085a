// Package dashboard reads the PromQL queries of a Grafana dashboard and, with
// Prometheus' own PromQL parser, the metric names each one selects.
package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Query is one PromQL query of a dashboard.
type Query struct {
	// Panel is the title of the panel that runs it, or "variable <name>"
	// for a template variable's label_values query.
	Panel string `json:"panel"`
	// Expr is the query as the dashboard writes it, Grafana variables and
	// all.
	Expr string `json:"expr"`
	// PromQL is Expr as Grafana sends it: its variables substituted (see
	// Substitute).
	PromQL string `json:"promql"`
	// Metrics are the metric names its selectors name, sorted and unique.
	Metrics []string `json:"metrics"`
}

// panel is what a Grafana panel holds that matters here; a row holds its
// collapsed panels in Panels.
type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type dashboardJSON struct {
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// builtinIntervals are Grafana's interval variables and the value a query is
// parsed with.
var builtinIntervals = regexp.MustCompile(`\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}`)

// variable is any other Grafana variable reference: $name or ${name}.
var variable = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}|\$[A-Za-z_][A-Za-z0-9_]*`)

// Substitute replaces Grafana's variables in expr as Grafana would before
// sending it, with stand-ins that keep its PromQL meaning: the interval
// variables become 5m, and every template variable ".*", which is what "All"
// sends for the regular-expression matchers (=~) dashboards use them in.
func Substitute(expr string) string {
	expr = builtinIntervals.ReplaceAllString(expr, "5m")
	return variable.ReplaceAllString(expr, ".*")
}

// labelValues is a template variable's query: label_values(<selector>, <label>).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// Queries returns every query of the dashboard: each target of each panel
// (rows' panels included), then each template variable's label_values
// selector. It fails, naming the panel, when a query does not parse or names
// no metric, and when a panel that shows data has no query.
func Queries(data []byte) ([]Query, error) {
	var d dashboardJSON
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	p := parser.NewParser(parser.Options{})
	var out []Query
	var errs []error
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, pn := range panels {
			walk(pn.Panels)
			if pn.Type == "row" || pn.Type == "text" {
				continue
			}
			if len(pn.Targets) == 0 {
				errs = append(errs, fmt.Errorf("panel %q has no query", pn.Title))
			}
			for _, t := range pn.Targets {
				q, err := query(p, pn.Title, t.Expr, false)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				out = append(out, q)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				errs = append(errs, fmt.Errorf("variable %q: query %s", v.Name, v.Query))
				continue
			}
			q = obj.Query
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			errs = append(errs, fmt.Errorf("variable %q: %q is not label_values(<selector>, <label>)", v.Name, q))
			continue
		}
		vq, err := query(p, "variable "+v.Name, m[1], true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vq.Expr = q
		out = append(out, vq)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// query parses one expression (a series selector when selector is true).
func query(p parser.Parser, panel, expr string, selector bool) (Query, error) {
	q := Query{Panel: panel, Expr: expr, PromQL: Substitute(expr)}
	names := map[string]bool{}
	if selector {
		matchers, err := p.ParseMetricSelector(q.PromQL)
		if err != nil {
			return q, fmt.Errorf("%s: %q: %w", panel, expr, err)
		}
		addName(names, "", matchers)
	} else {
		e, err := p.ParseExpr(q.PromQL)
		if err != nil {
			return q, fmt.Errorf("panel %q: %q: %w", panel, expr, err)
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				addName(names, vs.Name, vs.LabelMatchers)
			}
			return nil
		})
	}
	for n := range names {
		q.Metrics = append(q.Metrics, n)
	}
	sort.Strings(q.Metrics)
	if len(q.Metrics) == 0 {
		return q, fmt.Errorf("%s: %q names no metric", panel, expr)
	}
	return q, nil
}

// addName adds the metric name a selector names: its name, or an equality
// matcher on __name__.
func addName(names map[string]bool, name string, matchers []*labels.Matcher) {
	if name != "" {
		names[name] = true
		return
	}
	for _, m := range matchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			names[m.Value] = true
		}
	}
}

// String describes q in one line.
func (q Query) String() string {
	return fmt.Sprintf("%s: %s [%s]", q.Panel, q.Expr, strings.Join(q.Metrics, " "))
}
