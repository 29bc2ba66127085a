package query_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

func TestSettingsOfTellsWhatTheOptionsAsk(t *testing.T) {
	s, err := query.SettingsOf()
	if err != nil || s.Live || s.Selector != nil {
		t.Fatalf("no options = %+v, %v", s, err)
	}
	s, err = query.SettingsOf(query.Live(), nil, query.WithLabelSelector("tier=gold,app!=db"))
	if err != nil || !s.Live {
		t.Fatalf("Live and a selector = %+v, %v", s, err)
	}
	if !s.Selector.Matches(labels.Set{"tier": "gold"}) || s.Selector.Matches(labels.Set{"tier": "gold", "app": "db"}) {
		t.Errorf("selector %q does not select what it says", s.Selector)
	}
	s, err = query.SettingsOf(query.MatchingLabels(map[string]string{"a": "1"}))
	if err != nil || s.Selector.String() != "a=1" {
		t.Errorf("MatchingLabels = %v, %v", s.Selector, err)
	}
	if s, err = query.SettingsOf(query.FromWatch("pods")); err != nil || s.Watch != "pods" {
		t.Errorf("FromWatch = %+v, %v", s, err)
	}
	if _, err := query.SettingsOf(query.FromWatch("")); err == nil {
		t.Error("FromWatch without a name gave no error")
	}
	if _, err := query.SettingsOf(query.WithLabelSelector("tier in gold")); err == nil {
		t.Error("an invalid selector gave no error")
	}
}
