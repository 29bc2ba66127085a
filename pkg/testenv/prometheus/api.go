package prometheus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// Sample is one element of an instant query's result.
type Sample struct {
	// Metric is the series' labels, with __name__ when the query kept it.
	Metric map[string]string
	// Value is the sample's value.
	Value float64
	// Time is the evaluation time.
	Time time.Time
}

// Target is one active scrape target, as /api/v1/targets lists it.
type Target struct {
	// Labels are the target's labels after relabeling: the labels its
	// series get (job, instance, and what the relabeling added).
	Labels map[string]string `json:"labels"`
	// DiscoveredLabels are the labels service discovery gave it, before
	// relabeling (__address__, __meta_kubernetes_*, ...).
	DiscoveredLabels map[string]string `json:"discoveredLabels"`
	// ScrapePool is the scrape job's name.
	ScrapePool string `json:"scrapePool"`
	// ScrapeURL is the URL scraped.
	ScrapeURL string `json:"scrapeUrl"`
	// Health is "up", "down" or "unknown" (not scraped yet).
	Health string `json:"health"`
	// LastError is the last scrape's error, empty when it succeeded.
	LastError string `json:"lastError"`
	// LastScrape is when the target was last scraped.
	LastScrape time.Time `json:"lastScrape"`
}

// apiResponse is the envelope of every /api/v1 answer.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

// get GETs path (with query) from the server; with into it decodes the
// data of an /api/v1 answer into it.
func (s *Server) get(ctx context.Context, path string, query url.Values, into ...any) error {
	u := s.url + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if len(into) == 0 {
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return nil
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("GET %s: %s: %.200s", path, resp.Status, body)
	}
	if r.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s: %s", path, resp.Status, r.ErrorType, r.Error)
	}
	if err := json.Unmarshal(r.Data, into[0]); err != nil {
		return fmt.Errorf("GET %s: decoding %.200s: %w", path, r.Data, err)
	}
	return nil
}

// Query evaluates promql at the current time (GET /api/v1/query) and returns
// the result: a vector's samples, or one sample without labels for a scalar.
// A query that does not parse or fails returns the server's error.
func (s *Server) Query(ctx context.Context, promql string) ([]Sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := s.get(ctx, "/api/v1/query", url.Values{"query": {promql}}, &data); err != nil {
		return nil, fmt.Errorf("prometheus: query %q: %w", promql, err)
	}
	switch data.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &vec); err != nil {
			return nil, fmt.Errorf("prometheus: query %q: %w", promql, err)
		}
		out := make([]Sample, 0, len(vec))
		for _, v := range vec {
			smp, err := sample(v.Metric, v.Value)
			if err != nil {
				return nil, fmt.Errorf("prometheus: query %q: %w", promql, err)
			}
			out = append(out, smp)
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, fmt.Errorf("prometheus: query %q: %w", promql, err)
		}
		smp, err := sample(map[string]string{}, v)
		if err != nil {
			return nil, fmt.Errorf("prometheus: query %q: %w", promql, err)
		}
		return []Sample{smp}, nil
	}
	return nil, fmt.Errorf("prometheus: query %q: a %s result; want an instant vector or a scalar", promql, data.ResultType)
}

// sample decodes a [time, "value"] pair.
func sample(metric map[string]string, v [2]any) (Sample, error) {
	ts, ok := v[0].(float64)
	str, ok2 := v[1].(string)
	if !ok || !ok2 {
		return Sample{}, fmt.Errorf("a sample %v is not [time, \"value\"]", v)
	}
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return Sample{}, err
	}
	sec := int64(ts)
	return Sample{Metric: metric, Value: f, Time: time.Unix(sec, int64((ts-float64(sec))*1e9))}, nil
}

// Targets lists the active scrape targets (GET /api/v1/targets), ordered by
// scrape pool and URL.
func (s *Server) Targets(ctx context.Context) ([]Target, error) {
	var data struct {
		Active []Target `json:"activeTargets"`
	}
	if err := s.get(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &data); err != nil {
		return nil, fmt.Errorf("prometheus: targets: %w", err)
	}
	sort.Slice(data.Active, func(i, j int) bool {
		a, b := data.Active[i], data.Active[j]
		return a.ScrapePool < b.ScrapePool || a.ScrapePool == b.ScrapePool && a.ScrapeURL < b.ScrapeURL
	})
	return data.Active, nil
}

// DroppedTargets lists the targets that service discovery found and
// relabeling dropped (GET /api/v1/targets?state=dropped): only their
// DiscoveredLabels and ScrapePool are set. Prometheus keeps all of them
// unless a job's keep_dropped_targets limits it.
func (s *Server) DroppedTargets(ctx context.Context) ([]Target, error) {
	var data struct {
		Dropped []Target `json:"droppedTargets"`
	}
	if err := s.get(ctx, "/api/v1/targets", url.Values{"state": {"dropped"}}, &data); err != nil {
		return nil, fmt.Errorf("prometheus: dropped targets: %w", err)
	}
	return data.Dropped, nil
}

// MetricNames lists the names of every series the server holds (GET
// /api/v1/label/__name__/values), sorted.
func (s *Server) MetricNames(ctx context.Context) ([]string, error) {
	var names []string
	if err := s.get(ctx, "/api/v1/label/__name__/values", nil, &names); err != nil {
		return nil, fmt.Errorf("prometheus: metric names: %w", err)
	}
	sort.Strings(names)
	return names, nil
}
