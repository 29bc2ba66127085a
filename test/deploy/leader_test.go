package deploy

import (
	"slices"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/leader"
)

// TestHomeRoleIsLeaderPolicyRules keeps the -home Role, what the operator
// does in its own namespace through pkg/leader and pkg/metrics, equal to
// leader.PolicyRules for every resource it grants: the same verbs, which the
// leader package's tests prove enough with a replica bound to nothing more.
func TestHomeRoleIsLeaderPolicyRules(t *testing.T) {
	verbs := map[string][]string{}
	for _, r := range leader.PolicyRules() {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				verbs[g+"/"+res] = r.Verbs
			}
		}
	}
	home := roles(t, "deploy/operator", "Role")["prometheus-jmx-exporter-operator-home"]
	if len(home.Rules) == 0 {
		t.Fatal("no -home Role in deploy/operator")
	}
	for _, r := range home.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				want, ok := verbs[g+"/"+res]
				if !ok {
					t.Errorf("the -home Role grants %s %s, which leader.PolicyRules does not list", g, res)
					continue
				}
				if !slices.Equal(sorted(r.Verbs), sorted(want)) {
					t.Errorf("the -home Role grants %v on %s %s, leader.PolicyRules %v", r.Verbs, g, res, want)
				}
			}
		}
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
