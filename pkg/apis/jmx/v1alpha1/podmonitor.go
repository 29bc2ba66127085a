package v1alpha1

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/common/model"
)

// Validate reports what the schema cannot check and Prometheus Operator
// would refuse the PodMonitor for (its ResourceSelector: the scrape timeout
// against the interval, the relabel configs as its LabelConfigValidator
// checks them for Prometheus 3, whose label names are any UTF-8), naming the
// field. A nil s is valid.
func (s *PodMonitorSettings) Validate() error {
	if s == nil {
		return nil
	}
	var errs []error
	interval, intervalErr := model.ParseDuration(s.Interval)
	if s.Interval != "" && intervalErr != nil {
		errs = append(errs, fmt.Errorf("interval %q: %w", s.Interval, intervalErr))
	}
	if s.ScrapeTimeout != "" {
		if timeout, err := model.ParseDuration(s.ScrapeTimeout); err != nil {
			errs = append(errs, fmt.Errorf("scrapeTimeout %q: %w", s.ScrapeTimeout, err))
		} else if s.Interval == "" {
			errs = append(errs, errors.New("scrapeTimeout needs interval"))
		} else if intervalErr == nil && timeout > interval {
			errs = append(errs, fmt.Errorf("scrapeTimeout %s is longer than interval %s", s.ScrapeTimeout, s.Interval))
		}
	}
	if s.SampleLimit != nil && *s.SampleLimit < 0 {
		errs = append(errs, fmt.Errorf("sampleLimit %d is negative", *s.SampleLimit))
	}
	for i, rc := range s.MetricRelabelings {
		if err := rc.validate(); err != nil {
			errs = append(errs, fmt.Errorf("metricRelabelings[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Prometheus' defaults of a relabel config's fields.
const (
	defaultRelabelRegex       = "(.*)"
	defaultRelabelSeparator   = ";"
	defaultRelabelReplacement = "$1"
)

// relabelActions are the actions Prometheus 3 knows, lower case.
var relabelActions = map[string]bool{"replace": true, "keep": true, "drop": true, "hashmod": true, "labelmap": true,
	"labeldrop": true, "labelkeep": true, "lowercase": true, "uppercase": true, "keepequal": true, "dropequal": true}

// validate checks rc as Prometheus Operator's LabelConfigValidator does for
// Prometheus 3 (the schema checks the same rules but the regex).
func (rc RelabelConfig) validate() error {
	action := strings.ToLower(rc.Action)
	if action == "" {
		action = "replace"
	}
	if !relabelActions[action] {
		return fmt.Errorf("unknown action %q", rc.Action)
	}
	if _, err := regexp.Compile("^(?s:" + rc.Regex + ")$"); err != nil {
		return fmt.Errorf("regex %q: %w", rc.Regex, err)
	}
	for _, l := range rc.SourceLabels {
		if l == "" || !utf8.ValidString(l) {
			return fmt.Errorf("sourceLabels: %q is not a label name", l)
		}
	}
	sep := rc.Separator != nil && *rc.Separator != defaultRelabelSeparator
	repl := rc.Replacement != nil && *rc.Replacement != defaultRelabelReplacement
	switch action {
	case "replace", "hashmod", "lowercase", "uppercase", "keepequal", "dropequal":
		if rc.TargetLabel == "" || !utf8.ValidString(rc.TargetLabel) {
			return fmt.Errorf("action %s needs targetLabel, a label name", rc.Action)
		}
	}
	switch action {
	case "hashmod":
		if rc.Modulus <= 0 {
			return errors.New("action hashmod needs a modulus above 0")
		}
	case "lowercase", "uppercase":
		if repl {
			return fmt.Errorf("action %s takes no replacement", rc.Action)
		}
	case "keepequal", "dropequal":
		if rc.Regex != "" && rc.Regex != defaultRelabelRegex || rc.Modulus != 0 || sep || repl {
			return fmt.Errorf("action %s takes only sourceLabels and targetLabel", rc.Action)
		}
	case "labelmap":
		if rc.Replacement != nil && (*rc.Replacement == "" || !utf8.ValidString(*rc.Replacement)) {
			return fmt.Errorf("action labelmap: replacement %q is not a label name", *rc.Replacement)
		}
	case "labeldrop", "labelkeep":
		if len(rc.SourceLabels) > 0 || rc.TargetLabel != "" || rc.Modulus != 0 || sep || repl {
			return fmt.Errorf("action %s takes only regex", rc.Action)
		}
	}
	return nil
}
