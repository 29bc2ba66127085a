package action_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

func TestSettingsOfTellsWhatTheOptionsAsk(t *testing.T) {
	if s := action.SettingsOf(); s != (action.Settings{}) {
		t.Fatalf("no options = %+v", s)
	}
	s := action.SettingsOf(action.WithFieldManager("me"), action.DryRun(), action.Force(), nil,
		action.WithPropagationPolicy(metav1.DeletePropagationForeground), action.WithGracePeriod(5),
		action.WithPreconditions("uid-1", "7"))
	if s.FieldManager != "me" || !s.DryRun || !s.Force {
		t.Errorf("settings = %+v", s)
	}
	if s.PropagationPolicy == nil || *s.PropagationPolicy != metav1.DeletePropagationForeground ||
		s.GracePeriodSeconds == nil || *s.GracePeriodSeconds != 5 ||
		s.Preconditions == nil || *s.Preconditions.UID != "uid-1" || *s.Preconditions.ResourceVersion != "7" {
		t.Errorf("delete settings = %+v", s)
	}
	// The pointers are the caller's: changing them changes no later call.
	opt := action.WithPreconditions("uid-1", "7")
	first := action.SettingsOf(opt)
	*first.Preconditions.ResourceVersion = "changed"
	if again := action.SettingsOf(opt); *again.Preconditions.ResourceVersion != "7" {
		t.Errorf("SettingsOf shares its pointers with the option: %q", *again.Preconditions.ResourceVersion)
	}
}
